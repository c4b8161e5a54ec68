package io.ticketing.client;

/** Not acquired within the wait (the server answered {@code T}, or wait 0 on a held key). */
public class AcquireTimeoutException extends TicketingException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what happened
     * @param code the protocol code (docs/protocol.md §4), or -1 when none
     * @param cause the underlying failure, or null
     */
    public AcquireTimeoutException(String message, int code, Throwable cause) {
        super(message, code, cause);
    }

    /**
     * Creates the exception without a protocol code.
     *
     * @param message what happened
     */
    public AcquireTimeoutException(String message) {
        super(message, -1, null);
    }
}
