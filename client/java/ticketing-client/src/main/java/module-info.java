/** The official Java client of the Ticketing lock server. */
module io.ticketing.client {
    requires java.logging;

    exports io.ticketing.client;
}
