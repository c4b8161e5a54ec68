/**
 * The official Java client of the Ticketing lock server. Logs through {@link System.Logger}
 * ("io.ticketing.client"): java.util.logging by default, SLF4J or Log4j when their
 * System.LoggerFinder is on the class path; no dependency.
 */
module io.ticketing.client {
    exports io.ticketing.client;
}
