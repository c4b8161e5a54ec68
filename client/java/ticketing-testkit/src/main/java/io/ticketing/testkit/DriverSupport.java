package io.ticketing.testkit;

import io.ticketing.client.AcquireTimeoutException;
import io.ticketing.client.AuthenticationException;
import io.ticketing.client.BusyException;
import io.ticketing.client.ClientClosedException;
import io.ticketing.client.ConnectionException;
import io.ticketing.client.IndeterminateException;
import io.ticketing.client.InvalidArgumentException;
import io.ticketing.client.NotHolderException;
import io.ticketing.client.ProtocolException;
import io.ticketing.client.TicketingClient;
import io.ticketing.client.TicketingException;
import io.ticketing.client.TlsException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CancellationException;

/** Shared pieces of the Java and Kotlin drivers. */
public final class DriverSupport {
    private DriverSupport() {}

    private static final PrintStream OUT = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false, StandardCharsets.UTF_8);

    /**
     * Writes one result line and flushes it.
     *
     * @param m the result object
     */
    public static void emit(Map<String, Object> m) {
        String line = Json.write(m);
        synchronized (OUT) {
            OUT.print(line);
            OUT.print('\n');
            OUT.flush();
        }
    }

    /**
     * An ok result.
     *
     * @param id the command id
     * @return a mutable result map
     */
    public static Map<String, Object> ok(Object id) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("id", id);
        m.put("ok", true);
        return m;
    }

    /**
     * An error result.
     *
     * @param id the command id
     * @param kind the error kind
     * @param code the protocol code or -1
     * @param msg the message
     * @return the result map
     */
    public static Map<String, Object> err(Object id, String kind, int code, String msg) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("id", id);
        m.put("ok", false);
        m.put("error", kind);
        if (code >= 0) {
            m.put("code", code);
        }
        m.put("message", msg == null ? kind : msg);
        return m;
    }

    /**
     * Maps an exception to an error result.
     *
     * @param id the command id
     * @param e the exception
     * @return the result map
     */
    public static Map<String, Object> error(Object id, Throwable e) {
        String kind;
        int code = -1;
        if (e instanceof TicketingException) {
            code = ((TicketingException) e).code();
        }
        if (e instanceof AcquireTimeoutException) {
            kind = "timeout";
        } else if (e instanceof io.ticketing.client.InsufficientLeaseException) {
            kind = "insufficient_lease";
        } else if (e instanceof io.ticketing.client.UnsupportedFeatureException) {
            kind = "unsupported";
        } else if (e instanceof BusyException) {
            kind = "busy";
        } else if (e instanceof IndeterminateException) {
            kind = e.getCause() instanceof ClientClosedException ? "closed" : "indeterminate";
        } else if (e instanceof NotHolderException) {
            kind = "not_holder";
        } else if (e instanceof InvalidArgumentException || e instanceof IllegalArgumentException) {
            kind = "invalid";
        } else if (e instanceof AuthenticationException) {
            kind = "auth";
        } else if (e instanceof TlsException) {
            kind = "tls";
        } else if (e instanceof ConnectionException) {
            kind = "connect";
        } else if (e instanceof ClientClosedException) {
            kind = "closed";
        } else if (e instanceof ProtocolException) {
            kind = "protocol";
        } else if (e instanceof CancellationException || e instanceof InterruptedException) {
            kind = "cancelled";
        } else {
            kind = "internal";
        }
        if (kind.equals("indeterminate") || kind.equals("timeout") || kind.equals("not_holder")) {
            code = code > 0 ? code : -1;
        }
        return err(id, kind, code, e.getMessage() == null ? e.toString() : e.getMessage());
    }

    /**
     * Parses the key of a command (key or key_hex).
     *
     * @param cmd the command
     * @return the key bytes
     */
    public static byte[] key(Map<?, ?> cmd) {
        Object hex = cmd.get("key_hex");
        if (hex != null) {
            return HexFormat.of().parseHex((String) hex);
        }
        return ((String) cmd.get("key")).getBytes(StandardCharsets.UTF_8);
    }

    /**
     * The key of a command as a string (the client's String API, which refuses a lone UTF-16
     * surrogate, R8), or null when it came as key_hex.
     *
     * @param cmd the command
     * @return the key string, or null
     */
    public static String keyString(Map<?, ?> cmd) {
        return cmd.get("key_hex") != null ? null : (String) cmd.get("key");
    }

    /**
     * The keys of a set command.
     *
     * @param cmd the command
     * @return the keys
     */
    public static List<String> keys(Map<?, ?> cmd) {
        List<String> out = new java.util.ArrayList<>();
        for (Object o : (List<?>) cmd.get("keys")) {
            out.add((String) o);
        }
        return out;
    }

    /**
     * The token field, unsigned decimal.
     *
     * @param cmd the command
     * @return the token bits
     */
    public static long token(Map<?, ?> cmd) {
        return Long.parseUnsignedLong((String) cmd.get("token"));
    }

    /**
     * A duration field in ms (negative values pass through, for the client to refuse).
     *
     * @param cmd the command
     * @param name the field
     * @return the duration
     */
    public static Duration ms(Map<?, ?> cmd, String name) {
        Object v = cmd.get(name);
        if (v == null) {
            return Duration.ZERO;
        }
        return Duration.ofMillis(((Number) v).longValue());
    }

    /**
     * Builds a client from a connect command.
     *
     * @param cmd the command
     * @return the client
     */
    public static TicketingClient connect(Map<?, ?> cmd) {
        TicketingClient.Builder b = TicketingClient.builder();
        for (Object a : (List<?>) cmd.get("addrs")) {
            b.addresses((String) a);
        }
        Object tok = cmd.get("token");
        if (tok != null) {
            b.token((String) tok);
        }
        Object to = cmd.get("connect_timeout_ms");
        if (to != null) {
            b.connectTimeout(Duration.ofMillis(((Number) to).longValue()));
        }
        Object aa = cmd.get("answer_allowance_ms");
        if (aa instanceof Number) {
            b.answerAllowance(Duration.ofMillis(((Number) aa).longValue()));
        }
        Object label = cmd.get("label");
        if (label instanceof String) {
            b.label((String) label);
        }
        Object tls = cmd.get("tls");
        if (tls instanceof Map) {
            Map<?, ?> t = (Map<?, ?>) tls;
            b.tls(path(t.get("ca")), path(t.get("cert")), path(t.get("key")), (String) t.get("server_name"));
        }
        return b.build();
    }

    private static Path path(Object o) {
        return o == null || ((String) o).isEmpty() ? null : Path.of((String) o);
    }

    /**
     * The info result.
     *
     * @param id the command id
     * @param lang java or kotlin
     * @return the result map
     */
    public static Map<String, Object> info(Object id, String lang) {
        Map<String, Object> m = ok(id);
        m.put("language", lang);
        m.put("client_version", TicketingClient.VERSION);
        m.put("runtime", "java " + System.getProperty("java.version") + (lang.equals("kotlin") ? ", kotlin " + kotlin.KotlinVersion.CURRENT : ""));
        return m;
    }
}
