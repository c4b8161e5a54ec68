package io.ticketing.testkit

import io.ticketing.client.TicketingClient
import io.ticketing.kotlin.acquire
import io.ticketing.kotlin.releaseSuspending
import io.ticketing.kotlin.withLock
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.Job
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
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
            "acquire" -> run(id) {
                val l = cl().acquire(DriverSupport.key(cmd), ms(cmd, "lease_ms"), ms(cmd, "wait_ms"))
                DriverSupport.ok(id).also {
                    it["token"] = l.tokenString()
                    it["deadline_in_ms"] = l.remaining().toMillis()
                }
            }
            "release" -> run(id) {
                cl().releaseSuspending(DriverSupport.key(cmd), java.lang.Long.parseUnsignedLong(cmd["token"] as String))
                DriverSupport.ok(id)
            }
            "with_lock" -> run(id) {
                val fail = cmd["fail"] == true
                var token = ""
                try {
                    cl().withLock(DriverSupport.key(cmd), ms(cmd, "lease_ms"), ms(cmd, "wait_ms")) { l ->
                        token = l.tokenString()
                        delay(ms(cmd, "hold_ms"))
                        if (fail) throw ScopeFailure()
                    }
                } catch (e: ScopeFailure) {
                    // raised inside the scope as asked; withLock released the lease
                }
                DriverSupport.ok(id).also { it["token"] = token }
            }
            else -> DriverSupport.emit(DriverSupport.err(id, "internal", -1, "unknown cmd $name"))
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
