package io.ticketing.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The default callback executor: every task runs, blocking tasks do not starve the others. */
@Timeout(60)
class CallbackPoolTest {
    @Test
    void runsEveryTaskOfManyBursts() throws Exception {
        CallbackPool p = new CallbackPool(2);
        AtomicInteger ran = new AtomicInteger();
        int n = 200_000;
        CountDownLatch all = new CountDownLatch(n);
        Thread[] ts = new Thread[4];
        for (int t = 0; t < ts.length; t++) {
            ts[t] = new Thread(() -> {
                for (int i = 0; i < n / ts.length; i++) {
                    p.execute(() -> {
                        ran.incrementAndGet();
                        all.countDown();
                    });
                    if (i % 1000 == 0) {
                        Thread.yield(); // let the workers go idle now and then
                    }
                }
            });
            ts[t].start();
        }
        for (Thread t : ts) {
            t.join();
        }
        assertTrue(all.await(30, TimeUnit.SECONDS), "ran " + ran.get() + " of " + n);
        assertEquals(n, ran.get());
        p.shutdown();
        assertThrows(RejectedExecutionException.class, () -> p.execute(() -> {}));
    }

    @Test
    void growsWhenEveryWorkerIsBlockedInACallback() throws Exception {
        CallbackPool p = new CallbackPool(2);
        // Six callbacks that can only finish together: needs six threads at once. The client's
        // sweeper calls tick; here the test does.
        CountDownLatch together = new CountDownLatch(6);
        CountDownLatch finished = new CountDownLatch(6);
        for (int i = 0; i < 6; i++) {
            p.execute(() -> {
                together.countDown();
                try {
                    if (together.await(30, TimeUnit.SECONDS)) {
                        finished.countDown();
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
        }
        Thread ticker = new Thread(() -> {
            while (finished.getCount() > 0) {
                p.tick();
                try {
                    Thread.sleep(20);
                } catch (InterruptedException e) {
                    return;
                }
            }
        });
        ticker.setDaemon(true);
        ticker.start();
        assertTrue(finished.await(30, TimeUnit.SECONDS), "blocked callbacks starved the pool");
        ticker.interrupt();
        p.shutdown();
    }

    @Test
    void shutdownRunsWhatIsQueued() throws Exception {
        CallbackPool p = new CallbackPool(1);
        CountDownLatch gate = new CountDownLatch(1);
        CountDownLatch done = new CountDownLatch(3);
        p.execute(() -> {
            try {
                gate.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            done.countDown();
        });
        p.execute(done::countDown);
        p.execute(done::countDown);
        p.shutdown();
        gate.countDown();
        assertTrue(done.await(30, TimeUnit.SECONDS));
    }
}
