@file:JvmName("TicketingCoroutines")

package io.ticketing.kotlin

import io.ticketing.client.AcquireTimeoutException
import io.ticketing.client.Lease
import io.ticketing.client.TicketingClient
import kotlinx.coroutines.NonCancellable
import kotlinx.coroutines.future.await
import kotlinx.coroutines.withContext
import java.util.concurrent.Executor
import kotlin.time.Duration
import kotlin.time.toJavaDuration

/**
 * Acquires [key], suspending (never blocking a thread) up to [wait] in the key's FIFO queue;
 * [wait] bounds the whole call, connecting included. Cancelling the coroutine withdraws the
 * queued acquire; a grant that won the race is released by the client.
 */
suspend fun TicketingClient.acquire(key: String, lease: Duration, wait: Duration): Lease =
    acquire(key.toByteArray(Charsets.UTF_8), lease, wait)

// await() dispatches the resumption on the coroutine's dispatcher, so the futures may complete
// directly on the client's I/O thread (one thread hop less).
private val direct = Executor { it.run() }

/** [acquire] with a raw byte key. */
suspend fun TicketingClient.acquire(key: ByteArray, lease: Duration, wait: Duration): Lease =
    acquireAsync(key, lease.toJavaDuration(), wait.toJavaDuration(), direct).await()

/** Tries [key] once (wait 0): null when it is held. */
suspend fun TicketingClient.tryAcquire(key: String, lease: Duration): Lease? =
    try {
        acquire(key, lease, Duration.ZERO)
    } catch (e: AcquireTimeoutException) {
        null
    }

/** Releases [key] held with [token], suspending until the server confirmed (`O`) or 5 s passed. */
suspend fun TicketingClient.releaseSuspending(key: String, token: Long) {
    releaseAsync(key.toByteArray(Charsets.UTF_8), token, direct).await()
}

/** [releaseSuspending] with a raw byte key. */
suspend fun TicketingClient.releaseSuspending(key: ByteArray, token: Long) {
    releaseAsync(key, token, direct).await()
}

/** Releases this lease, suspending; idempotent once confirmed. */
suspend fun Lease.releaseSuspending() {
    releaseAsync(direct).await()
}

/**
 * Runs [block] holding [key] and releases the lock afterwards, on normal exit, on failure and on
 * cancellation alike: the release runs in `withContext(NonCancellable)`. When [block] succeeded
 * and the release failed, the release's error is thrown; when [block] failed, its error is
 * thrown with the release's error suppressed.
 */
suspend fun <T> TicketingClient.withLock(key: String, lease: Duration, wait: Duration, block: suspend (Lease) -> T): T =
    withLease(acquire(key, lease, wait), block)

/** [withLock] with a raw byte key. */
suspend fun <T> TicketingClient.withLock(key: ByteArray, lease: Duration, wait: Duration, block: suspend (Lease) -> T): T =
    withLease(acquire(key, lease, wait), block)

private suspend fun <T> withLease(l: Lease, block: suspend (Lease) -> T): T {
    val result = try {
        block(l)
    } catch (e: Throwable) {
        try {
            withContext(NonCancellable) { l.releaseSuspending() }
        } catch (r: Throwable) {
            e.addSuppressed(r)
        }
        throw e
    }
    withContext(NonCancellable) { l.releaseSuspending() }
    return result
}
