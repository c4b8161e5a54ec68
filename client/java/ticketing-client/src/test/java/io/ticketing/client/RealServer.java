package io.ticketing.client;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** A real {@code $TICKETING_BIN serve} on an OS-chosen loopback port; killed and reaped on close. */
final class RealServer implements AutoCloseable {
    private static final Pattern ADDR = Pattern.compile("msg=serving addr=(\\S+)");
    final Process proc;
    final String addr;

    RealServer(String... extra) throws IOException, InterruptedException {
        String bin = System.getenv("TICKETING_BIN");
        if (bin == null || bin.isEmpty()) {
            bin = "../../../bin/ticketing";
        }
        if (!Files.isExecutable(Path.of(bin))) {
            throw new IllegalStateException("server binary " + bin + " not found: set TICKETING_BIN");
        }
        List<String> cmd = new ArrayList<>(List.of(bin, "serve", "--listen", "127.0.0.1:0"));
        cmd.addAll(List.of(extra));
        proc = new ProcessBuilder(cmd).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        CompletableFuture<String> found = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(proc.getErrorStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    Matcher m = ADDR.matcher(line);
                    if (m.find()) {
                        found.complete(m.group(1));
                    }
                }
            } catch (IOException e) {
                // process gone
            }
            found.complete(null);
        });
        t.setDaemon(true);
        t.start();
        String a;
        try {
            a = found.get(15, TimeUnit.SECONDS);
        } catch (Exception e) {
            a = null;
        }
        if (a == null) {
            close();
            throw new IllegalStateException("server did not report its address");
        }
        addr = a;
    }

    TicketingClient client() {
        return TicketingClient.builder().addresses(addr).build();
    }

    @Override
    public void close() {
        proc.destroy();
        try {
            if (!proc.waitFor(5, TimeUnit.SECONDS)) {
                proc.destroyForcibly();
                proc.waitFor();
            }
        } catch (InterruptedException e) {
            proc.destroyForcibly();
            Thread.currentThread().interrupt();
        }
    }
}
