package io.ticketing.kotlin

import io.ticketing.client.AcquireTimeoutException
import io.ticketing.client.InvalidArgumentException
import io.ticketing.client.TicketingClient
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.test.runTest
import kotlinx.coroutines.withContext
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNotNull
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.BeforeAll
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestInstance
import java.io.BufferedReader
import java.io.InputStreamReader
import java.nio.file.Files
import java.nio.file.Path
import java.util.concurrent.CompletableFuture
import java.util.concurrent.TimeUnit
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * The Kotlin API's own logic against the real server ($TICKETING_BIN serve): where coroutines
 * resume, the suspending view's types, key sets in `withLock`. The shared scenarios (acquire,
 * withLock, cancel, timeouts, bad input) run in the testkit through the Kotlin driver.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class CoroutinesTest {
    private lateinit var proc: Process
    private lateinit var client: TicketingClient

    @BeforeAll
    fun start() {
        val bin = System.getenv("TICKETING_BIN")?.takeIf { it.isNotEmpty() } ?: "../../../bin/ticketing"
        check(Files.isExecutable(Path.of(bin))) { "server binary $bin not found: set TICKETING_BIN" }
        proc = ProcessBuilder(bin, "serve", "--listen", "127.0.0.1:0").redirectOutput(ProcessBuilder.Redirect.DISCARD).start()
        val found = CompletableFuture<String>()
        Thread {
            runCatching {
                BufferedReader(InputStreamReader(proc.errorStream)).useLines { lines ->
                    lines.forEach { l -> Regex("msg=serving addr=(\\S+)").find(l)?.let { found.complete(it.groupValues[1]) } }
                }
            }
        }.apply { isDaemon = true }.start()
        client = TicketingClient.builder().addresses(found.get(15, TimeUnit.SECONDS)).build()
    }

    @AfterAll
    fun stop() {
        client.close()
        proc.destroy()
        if (!proc.waitFor(5, TimeUnit.SECONDS)) proc.destroyForcibly().waitFor()
    }

    @Test
    fun unconfinedNeverResumesOnTheClientsThreads() {
        // issue 34 item 10: under Dispatchers.Unconfined the coroutine resumes where the future
        // completed; that must never be the socket reader (blocking there stalls other calls).
        kotlinx.coroutines.runBlocking(Dispatchers.Unconfined) {
            repeat(20) { i ->
                val l = client.acquire("kt/unconfined/$i", 10.seconds, 5.seconds)
                val t = Thread.currentThread().name
                assertTrue(!t.startsWith("ticketing-read") && !t.startsWith("ticketing-conn"), "resumed on $t after acquire")
                l.releaseSuspending()
                val t2 = Thread.currentThread().name
                assertTrue(!t2.startsWith("ticketing-read") && !t2.startsWith("ticketing-conn"), "resumed on $t2 after release")
            }
        }
    }

    @Test
    fun theSuspendingViewTakesJavaDurationsAndSuspends() = runTest {
        // issue 34 item 10: client.suspending() has no blocking member, so java.time.Duration
        // arguments still reach the suspending acquire; cancelling it withdraws.
        val locks = client.suspending()
        withContext(Dispatchers.Default) {
            val held = locks.acquire("kt/view", java.time.Duration.ofSeconds(10), java.time.Duration.ofSeconds(5))
            val waiter = async { locks.acquire("kt/view", java.time.Duration.ofSeconds(10), java.time.Duration.ofSeconds(30)) }
            delay(200)
            waiter.cancel()
            assertTrue(runCatching { waiter.await() }.isFailure)
            locks.release("kt/view", held.token())
            val n = locks.withLock("kt/view", java.time.Duration.ofSeconds(10), java.time.Duration.ofSeconds(5)) { it.token() }
            assertTrue(n != 0L)
            assertNotNull(locks.tryAcquire("kt/view", 10.seconds)?.also { it.releaseSuspending() })
        }
    }

    @Test
    fun withLockOfAKeySetHoldsEveryKeyAndReleasesTheSet() = runTest {
        // Protocol 1.1 key sets in the Kotlin idiom: withLock(keys) holds all, releases all.
        withContext(Dispatchers.Default) {
            val keys = listOf("kt/set/a", "kt/set/b")
            val inside = client.withLock(keys, 10.seconds, 5.seconds) { l ->
                assertEquals(keys, l.keys())
                assertNull(client.tryAcquire("kt/set/a", 10.seconds))
                assertNull(client.tryAcquire("kt/set/b", 10.seconds))
                l.token()
            }
            assertTrue(inside != 0L)
            for (k in keys) assertNotNull(client.tryAcquire(k, 10.seconds)?.also { it.releaseSuspending() }, k)
            // awaitEnding of a released lease returns at once (R12), never throws.
            val l = client.acquireSet(keys, 10.seconds, 5.seconds)
            l.releaseSuspending()
            withTimeout(2000) { l.awaitEnding(1.seconds) }
        }
    }
}
