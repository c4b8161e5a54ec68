@file:JvmName("TicketingCoroutines")

package io.ticketing.kotlin

import io.ticketing.client.AcquireTimeoutException
import io.ticketing.client.Lease
import io.ticketing.client.TicketingClient
import kotlinx.coroutines.CoroutineDispatcher
import kotlinx.coroutines.NonCancellable
import kotlinx.coroutines.future.await
import kotlinx.coroutines.withContext
import java.util.concurrent.CompletableFuture
import java.util.concurrent.Executor
import kotlin.coroutines.ContinuationInterceptor
import kotlin.coroutines.coroutineContext
import kotlin.time.Duration
import kotlin.time.toJavaDuration
import kotlin.time.toKotlinDuration

/**
 * Acquires [key], suspending (never blocking a thread) up to [wait] in the key's FIFO queue;
 * [wait] bounds the whole call, connecting included. Cancelling the coroutine withdraws the
 * queued acquire; a grant that won the race is released by the client.
 *
 * Takes [kotlin.time.Duration] only: `client.acquire(key, Duration.ofSeconds(..), ..)` with
 * `java.time.Duration` is the *blocking* Java member. In coroutine code prefer [suspending], whose
 * [SuspendingTicketingClient] has no blocking member to pick by mistake.
 */
suspend fun TicketingClient.acquire(key: String, lease: Duration, wait: Duration): Lease =
    acquire(key, lease, wait, Duration.ZERO)

/**
 * [acquire] with a minimum working time (R14): when the conservative remaining lease after the
 * grant is below [minRemaining], the client releases the grant at once and throws
 * [io.ticketing.client.InsufficientLeaseException]. A lone UTF-16 surrogate in [key] is refused
 * (never sent as `?`, R8).
 */
suspend fun TicketingClient.acquire(key: String, lease: Duration, wait: Duration, minRemaining: Duration): Lease =
    resumeSafely { ex ->
        acquireAsync(key, lease.toJavaDuration(), wait.toJavaDuration(),
            if (minRemaining > Duration.ZERO) minRemaining.toJavaDuration() else null, ex)
    }

/**
 * Acquires the key set [keys] atomically (protocol 1.1, 2..16 distinct keys, one lease and one
 * fencing token; see [TicketingClient.acquireSet]), suspending up to [wait]. Cancelling the
 * coroutine withdraws the set from every queue.
 */
suspend fun TicketingClient.acquireSet(keys: Collection<String>, lease: Duration, wait: Duration): Lease =
    resumeSafely { ex ->
        if (ex == null) {
            acquireSetAsync(keys, lease.toJavaDuration(), wait.toJavaDuration())
        } else {
            acquireSetAsync(keys, lease.toJavaDuration(), wait.toJavaDuration(), ex)
        }
    }

/** Releases the key set [keys] held with [token], suspending until the server confirmed. */
suspend fun TicketingClient.releaseSetSuspending(keys: Collection<String>, token: Long) {
    resumeSafely { ex -> if (ex == null) releaseSetAsync(keys, token) else releaseSetAsync(keys, token, ex) }
}

/**
 * Suspends until this lease is about to end ([margin] before its conservative deadline) or has
 * been released (R12); never throws for a released lease. Cancelling the caller stops the wait
 * only.
 */
suspend fun Lease.awaitEnding(margin: Duration) {
    ending(margin.toJavaDuration()).await()
}

/** A timed try (R13): waits up to [wait]; null when not acquired within it. */
suspend fun TicketingClient.tryAcquire(key: String, lease: Duration, wait: Duration): Lease? =
    try {
        acquire(key, lease, wait)
    } catch (e: AcquireTimeoutException) {
        null
    }

// A direct executor completes the client's futures on its socket reader thread. That is only
// safe when the coroutine's dispatcher moves the resumption elsewhere anyway (Default, IO, a
// single-thread dispatcher): one thread hop less. Under Dispatchers.Unconfined, an immediate
// dispatcher or no dispatcher at all, user code would resume on the reader thread (blocking there
// stalls every other call on that connection), so the futures complete on the client's callback
// executor instead (issue 34 item 10).
private val direct = Executor { it.run() }

private suspend fun <T> resumeSafely(start: (Executor?) -> CompletableFuture<T>): T {
    val ctx = coroutineContext
    val d = ctx[ContinuationInterceptor] as? CoroutineDispatcher
    val ex = if (d != null && d.isDispatchNeeded(ctx)) direct else null
    return start(ex).await()
}

/** [acquire] with a raw byte key. */
suspend fun TicketingClient.acquire(key: ByteArray, lease: Duration, wait: Duration): Lease =
    resumeSafely { ex ->
        if (ex == null) {
            acquireAsync(key, lease.toJavaDuration(), wait.toJavaDuration())
        } else {
            acquireAsync(key, lease.toJavaDuration(), wait.toJavaDuration(), ex)
        }
    }

/** Tries [key] once (wait 0): null when it is held. */
suspend fun TicketingClient.tryAcquire(key: String, lease: Duration): Lease? =
    try {
        acquire(key, lease, Duration.ZERO)
    } catch (e: AcquireTimeoutException) {
        null
    }

/** Releases [key] held with [token], suspending until the server confirmed (`O`) or 5 s passed. */
suspend fun TicketingClient.releaseSuspending(key: String, token: Long) {
    resumeSafely { ex -> releaseAsync(key, token, ex) }
}

/** [releaseSuspending] with a raw byte key. */
suspend fun TicketingClient.releaseSuspending(key: ByteArray, token: Long) {
    resumeSafely { ex -> if (ex == null) releaseAsync(key, token) else releaseAsync(key, token, ex) }
}

/** Releases this lease, suspending; idempotent once confirmed. */
suspend fun Lease.releaseSuspending() {
    resumeSafely { ex -> if (ex == null) releaseAsync() else releaseAsync(ex) }
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

/**
 * Runs [block] holding every key of the set [keys] (acquired atomically, see [acquireSet]) and
 * releases the set afterwards, as [withLock] with one key does.
 *
 * ```
 * client.withLock(listOf("acct/17", "acct/42"), 30.seconds, 5.seconds) { lease -> transfer(lease.token()) }
 * ```
 */
suspend fun <T> TicketingClient.withLock(keys: Collection<String>, lease: Duration, wait: Duration, block: suspend (Lease) -> T): T =
    withLease(acquireSet(keys, lease, wait), block)

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

/** The coroutine view of this client: every member suspends, none blocks (issue 34 item 10). */
fun TicketingClient.suspending(): SuspendingTicketingClient = SuspendingTicketingClient(this)

/**
 * The client for coroutine code: only suspending members, taking [kotlin.time.Duration] or
 * [java.time.Duration] alike, so a coroutine never picks the blocking Java `acquire` by the type
 * of its arguments. Wraps (and shares the connections of) [client]; closing stays with [client].
 *
 * ```
 * val locks = client.suspending()
 * locks.withLock("jobs/nightly", 10.minutes, 0.seconds) { lease -> work(lease.token()) }
 * ```
 */
class SuspendingTicketingClient(val client: TicketingClient) {
    /** Suspends up to [wait] for [key]; see [TicketingClient.acquire] (the extension). */
    suspend fun acquire(key: String, lease: Duration, wait: Duration): Lease = client.acquire(key, lease, wait)

    /** [acquire] with [java.time.Duration]s (still suspending). */
    suspend fun acquire(key: String, lease: java.time.Duration, wait: java.time.Duration): Lease =
        client.acquire(key, lease.toKotlinDuration(), wait.toKotlinDuration())

    /** [acquire] with a raw byte key. */
    suspend fun acquire(key: ByteArray, lease: Duration, wait: Duration): Lease = client.acquire(key, lease, wait)

    /** [acquire] with a raw byte key and [java.time.Duration]s. */
    suspend fun acquire(key: ByteArray, lease: java.time.Duration, wait: java.time.Duration): Lease =
        client.acquire(key, lease.toKotlinDuration(), wait.toKotlinDuration())

    /** [acquire] with a minimum working time; see [TicketingClient.acquire] (the extension). */
    suspend fun acquire(key: String, lease: Duration, wait: Duration, minRemaining: Duration): Lease =
        client.acquire(key, lease, wait, minRemaining)

    /** Acquires the key set [keys] atomically; see [TicketingClient.acquireSet] (the extension). */
    suspend fun acquireSet(keys: Collection<String>, lease: Duration, wait: Duration): Lease = client.acquireSet(keys, lease, wait)

    /** Releases the key set [keys] held with [token]. */
    suspend fun releaseSet(keys: Collection<String>, token: Long) = client.releaseSetSuspending(keys, token)

    /** Runs [block] holding the key set [keys]; see [TicketingClient.withLock] (the extension). */
    suspend fun <T> withLock(keys: Collection<String>, lease: Duration, wait: Duration, block: suspend (Lease) -> T): T =
        client.withLock(keys, lease, wait, block)

    /** A timed try: null when [key] was not acquired within [wait] (R13). */
    suspend fun tryAcquire(key: String, lease: Duration, wait: Duration): Lease? = client.tryAcquire(key, lease, wait)

    /** One attempt (wait 0): null when [key] is held. */
    suspend fun tryAcquire(key: String, lease: Duration): Lease? = client.tryAcquire(key, lease)

    /** [tryAcquire] with a [java.time.Duration]. */
    suspend fun tryAcquire(key: String, lease: java.time.Duration): Lease? = client.tryAcquire(key, lease.toKotlinDuration())

    /** Releases [key] held with [token]; suspends until `O` (or 5 s: IndeterminateException). */
    suspend fun release(key: String, token: Long) = client.releaseSuspending(key, token)

    /** [release] with a raw byte key. */
    suspend fun release(key: ByteArray, token: Long) = client.releaseSuspending(key, token)

    /** Runs [block] holding [key]; see [TicketingClient.withLock] (the extension). */
    suspend fun <T> withLock(key: String, lease: Duration, wait: Duration, block: suspend (Lease) -> T): T =
        client.withLock(key, lease, wait, block)

    /** [withLock] with [java.time.Duration]s. */
    suspend fun <T> withLock(key: String, lease: java.time.Duration, wait: java.time.Duration, block: suspend (Lease) -> T): T =
        client.withLock(key, lease.toKotlinDuration(), wait.toKotlinDuration(), block)
}
