package io.ticketing.client;

/** The request was sent but no definite answer came (connection lost, {@code U}): the caller must not assume it holds the lock, nor that a release happened. */
public class IndeterminateException extends TicketingException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what happened
     * @param code the protocol code (docs/protocol.md §4), or -1 when none
     * @param cause the underlying failure, or null
     */
    public IndeterminateException(String message, int code, Throwable cause) {
        super(message, code, cause);
    }

    /**
     * Creates the exception without a protocol code.
     *
     * @param message what happened
     */
    public IndeterminateException(String message) {
        super(message, -1, null);
    }
}
