package io.ticketing.client;

/** The client was closed. */
public class ClientClosedException extends TicketingException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what happened
     * @param code the protocol code (docs/protocol.md §4), or -1 when none
     * @param cause the underlying failure, or null
     */
    public ClientClosedException(String message, int code, Throwable cause) {
        super(message, code, cause);
    }

    /**
     * Creates the exception without a protocol code.
     *
     * @param message what happened
     */
    public ClientClosedException(String message) {
        super(message, -1, null);
    }
}
