package io.ticketing.client;

/**
 * The root of every error of the client (unchecked). {@link #code()} is the protocol code of
 * docs/protocol.md §4 when the server sent one, else -1.
 */
public class TicketingException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final int code;

    /**
     * Creates the exception.
     *
     * @param message what happened
     * @param code the protocol code, or -1 when none
     * @param cause the underlying failure, or null
     */
    public TicketingException(String message, int code, Throwable cause) {
        super(message, cause);
        this.code = code;
    }

    /**
     * The protocol code (docs/protocol.md §4) the server sent, or -1.
     *
     * @return the code or -1
     */
    public int code() {
        return code;
    }
}
