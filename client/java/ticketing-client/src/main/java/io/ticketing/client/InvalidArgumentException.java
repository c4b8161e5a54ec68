package io.ticketing.client;

/** A bad argument (checked before anything is sent), or the server's {@code E} answer with its code. */
public class InvalidArgumentException extends TicketingException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what happened
     * @param code the protocol code (docs/protocol.md §4), or -1 when none
     * @param cause the underlying failure, or null
     */
    public InvalidArgumentException(String message, int code, Throwable cause) {
        super(message, code, cause);
    }

    /**
     * Creates the exception without a protocol code.
     *
     * @param message what happened
     */
    public InvalidArgumentException(String message) {
        super(message, -1, null);
    }
}
