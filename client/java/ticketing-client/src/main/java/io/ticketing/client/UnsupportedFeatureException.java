package io.ticketing.client;

/** The server does not announce a protocol 1.1 feature the call needs (docs/protocol.md §12.1); nothing was sent. */
public class UnsupportedFeatureException extends TicketingException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what happened
     * @param code the protocol code (docs/protocol.md §4), or -1 when none
     * @param cause the underlying failure, or null
     */
    public UnsupportedFeatureException(String message, int code, Throwable cause) {
        super(message, code, cause);
    }

    /**
     * Creates the exception without a protocol code.
     *
     * @param message what happened
     */
    public UnsupportedFeatureException(String message) {
        super(message, -1, null);
    }
}
