package io.ticketing.client;

/** Definitely not acquired and not queued ({@code B}); {@link #code()} says why (QUEUE_FULL 1, OVERLOADED 2, CLOCK_UNHEALTHY 3, SHUTTING_DOWN 4, NO_QUORUM 5). Never retried by the client. */
public class BusyException extends TicketingException {
    private static final long serialVersionUID = 1L;

    /**
     * Creates the exception.
     *
     * @param message what happened
     * @param code the protocol code (docs/protocol.md §4), or -1 when none
     * @param cause the underlying failure, or null
     */
    public BusyException(String message, int code, Throwable cause) {
        super(message, code, cause);
    }

    /**
     * Creates the exception without a protocol code.
     *
     * @param message what happened
     */
    public BusyException(String message) {
        super(message, -1, null);
    }
}
