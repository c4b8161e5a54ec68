package io.ticketing.testkit

import io.ticketing.client.Lease
import io.ticketing.client.TicketingClient
import io.ticketing.kotlin.acquire
import io.ticketing.kotlin.acquireSet
import io.ticketing.kotlin.awaitEnding
import io.ticketing.kotlin.releaseSetSuspending
import io.ticketing.kotlin.releaseSuspending
import io.ticketing.kotlin.tryAcquire
import io.ticketing.kotlin.withLock
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.Job
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeoutOrNull
import java.io.BufferedReader
import java.io.InputStreamReader
import java.util.concurrent.ConcurrentHashMap
import kotlin.system.exitProcess
import kotlin.time.Duration.Companion.milliseconds

/** The testkit driver for the Kotlin coroutine API: one coroutine per command, cancel = Job.cancel. */
object KotlinDriver {
    private val scope = CoroutineScope(SupervisorJob() + Dispatchers.Default)
    private val jobs = ConcurrentHashMap<Any, Job>()
    private val cancelled = ConcurrentHashMap.newKeySet<Any>()
    private val leases = ConcurrentHashMap<String, Lease>() // by token: release_lease, lease_ending

    @Volatile
    private var client: TicketingClient? = null

    private class ScopeFailure : RuntimeException("failing inside withLock, as asked")

    @JvmStatic
    fun main(args: Array<String>) {
        val input = BufferedReader(InputStreamReader(System.`in`, Charsets.UTF_8))
        while (true) {
            val line = input.readLine() ?: break
            if (line.isBlank()) continue
            val cmd = try {
                Json.parse(line) as Map<*, *>
            } catch (e: RuntimeException) {
                System.err.println("driver: bad line: $e")
                continue
            }
            dispatch(cmd)
        }
        // EOF ends the program: scopes still open end (withLock releases, R10) as every pending
        // command is cancelled and waited for; then the client closes.
        runBlocking {
            withTimeoutOrNull(10_000) {
                val all = jobs.values.toList()
                all.forEach { it.cancel() }
                all.forEach { it.join() }
            }
        }
        client?.drain(java.time.Duration.ofSeconds(6)) // a grant that won the race with a cancel is released
        client?.close()
        exitProcess(0)
    }

    private fun cl(): TicketingClient = client ?: throw io.ticketing.client.ClientClosedException("no client: connect first")

    private fun dispatch(cmd: Map<*, *>) {
        val id = cmd["id"]!!
        when (val name = cmd["cmd"].toString()) {
            "connect" -> run(id, blocking = true) {
                val old = client
                client = null
                old?.close()
                client = DriverSupport.connect(cmd)
                DriverSupport.ok(id)
            }
            "close" -> run(id, blocking = true) {
                client?.close()
                DriverSupport.ok(id)
            }
            "info" -> DriverSupport.emit(DriverSupport.info(id, "kotlin"))
            "cancel" -> {
                val target = cmd["target"]!!
                cancelled.add(target)
                jobs[target]?.cancel()
                DriverSupport.emit(DriverSupport.ok(id))
            }
            "acquire" -> run(id) { granted(id, acquire(cmd)) }
            "try_acquire" -> run(id) {
                val ks = DriverSupport.keyString(cmd)
                val l = if (ks != null) {
                    cl().tryAcquire(ks, ms(cmd, "lease_ms"), ms(cmd, "wait_ms"))
                } else {
                    try {
                        cl().acquire(DriverSupport.key(cmd), ms(cmd, "lease_ms"), ms(cmd, "wait_ms"))
                    } catch (e: io.ticketing.client.AcquireTimeoutException) {
                        null
                    }
                }
                if (l == null) {
                    DriverSupport.ok(id).also { it["acquired"] = false }
                } else {
                    granted(id, l).also { it["acquired"] = true }
                }
            }
            "acquire_set" -> run(id) { granted(id, cl().acquireSet(DriverSupport.keys(cmd), ms(cmd, "lease_ms"), ms(cmd, "wait_ms"))) }
            "release_set" -> run(id) {
                cl().releaseSetSuspending(DriverSupport.keys(cmd), DriverSupport.token(cmd))
                DriverSupport.ok(id)
            }
            "release_lease" -> run(id) {
                val l = leases[cmd["token"].toString()]
                if (l == null) {
                    DriverSupport.err(id, "internal", -1, "no lease with that token in this driver")
                } else {
                    val already = l.isReleased
                    l.releaseSuspending()
                    DriverSupport.ok(id).also { it["already"] = already }
                }
            }
            "lease_ending" -> run(id) {
                val l = leases[cmd["token"].toString()]
                if (l == null) {
                    DriverSupport.err(id, "internal", -1, "no lease with that token in this driver")
                } else {
                    l.awaitEnding(ms(cmd, "margin_ms"))
                    DriverSupport.ok(id).also { it["remaining_ms"] = l.remaining().toMillis() }
                }
            }
            "release" -> run(id) {
                val ks = DriverSupport.keyString(cmd)
                if (ks != null) {
                    cl().releaseSuspending(ks, DriverSupport.token(cmd))
                } else {
                    cl().releaseSuspending(DriverSupport.key(cmd), DriverSupport.token(cmd))
                }
                DriverSupport.ok(id)
            }
            "with_lock" -> run(id) {
                val fail = cmd["fail"] == true
                var token = ""
                try {
                    val ks = DriverSupport.keyString(cmd)
                    val body: suspend (Lease) -> Unit = { l ->
                        token = l.tokenString()
                        delay(ms(cmd, "hold_ms"))
                        if (fail) throw ScopeFailure()
                    }
                    if (ks != null) {
                        cl().withLock(ks, ms(cmd, "lease_ms"), ms(cmd, "wait_ms"), body)
                    } else {
                        cl().withLock(DriverSupport.key(cmd), ms(cmd, "lease_ms"), ms(cmd, "wait_ms"), body)
                    }
                } catch (e: ScopeFailure) {
                    // raised inside the scope as asked; withLock released the lease
                }
                DriverSupport.ok(id).also { it["token"] = token }
            }
            else -> DriverSupport.emit(DriverSupport.err(id, "unsupported", -1, "unknown cmd $name"))
        }
    }

    private suspend fun acquire(cmd: Map<*, *>): Lease {
        val ks = DriverSupport.keyString(cmd) ?: return cl().acquire(DriverSupport.key(cmd), ms(cmd, "lease_ms"), ms(cmd, "wait_ms"))
        return cl().acquire(ks, ms(cmd, "lease_ms"), ms(cmd, "wait_ms"), ms(cmd, "min_remaining_ms"))
    }

    private fun granted(id: Any, l: Lease): MutableMap<String, Any?> {
        leases[l.tokenString()] = l
        return DriverSupport.ok(id).also {
            it["token"] = l.tokenString()
            it["deadline_in_ms"] = l.remaining().toMillis()
        }
    }

    private fun ms(cmd: Map<*, *>, name: String) = ((cmd[name] as? Number)?.toLong() ?: 0L).milliseconds

    private fun run(id: Any, blocking: Boolean = false, body: suspend () -> Map<String, Any?>) {
        val job = scope.launch(if (blocking) Dispatchers.IO else Dispatchers.Default) {
            val res = try {
                body()
            } catch (e: CancellationException) {
                DriverSupport.err(id, "cancelled", -1, "cancelled")
            } catch (e: Throwable) {
                DriverSupport.error(id, e)
            }
            jobs.remove(id)
            DriverSupport.emit(res)
        }
        jobs[id] = job
        if (cancelled.contains(id)) job.cancel()
    }
}
