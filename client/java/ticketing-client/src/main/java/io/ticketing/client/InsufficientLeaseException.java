package io.ticketing.client;

/** Granted with less than the minimum remaining lease the caller asked for (R14); the client released the grant. */
public class InsufficientLeaseException extends TicketingException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what happened
     * @param code the protocol code (docs/protocol.md §4), or -1 when none
     * @param cause the underlying failure, or null
     */
    public InsufficientLeaseException(String message, int code, Throwable cause) {
        super(message, code, cause);
    }

    /**
     * Creates the exception without a protocol code.
     *
     * @param message what happened
     */
    public InsufficientLeaseException(String message) {
        super(message, -1, null);
    }
}
