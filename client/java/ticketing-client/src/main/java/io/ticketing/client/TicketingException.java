package io.ticketing.client;

/**
 * The root of every error of the client (unchecked). {@link #code()} is the protocol code of
 * docs/protocol.md §4 when the server sent one, else -1.
 */
public class TicketingException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final int code;
    private String where; // the call and the server, e.g. acquire "k" at 127.0.0.1:7001 (R15)

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

    /** Sets the call and server the message starts with (once). */
    TicketingException at(String where) {
        if (this.where == null) {
            this.where = where;
        }
        return this;
    }

    /**
     * The message, starting with the call, its key and the server it went to (docs/architecture.md
     * "Client library behaviour", R15), e.g. {@code acquire "orders/42" at 10.0.0.1:7001: busy
     * (QUEUE_FULL), not acquired}.
     *
     * @return the message
     */
    @Override
    public String getMessage() {
        String m = super.getMessage();
        return where == null ? m : where + ": " + m;
    }
}
