package io.ticketing.testkit

import io.ticketing.client.TicketingClient
import io.ticketing.kotlin.acquire
import io.ticketing.kotlin.releaseSuspending
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import java.time.Duration
import java.util.concurrent.CompletableFuture
import java.util.concurrent.atomic.AtomicLong
import kotlin.time.Duration.Companion.seconds

/** acquire+release pairs through one client: `Bench host:port seconds`. */
object Bench {
    private val lease = Duration.ofSeconds(10)
    private val wait = Duration.ofSeconds(5)

    @JvmStatic
    fun main(args: Array<String>) {
        val addr = args[0]
        val seconds = args.getOrElse(1) { "5" }.toDouble()
        val lang = args.getOrElse(2) { "all" }
        // java-virtual: the blocking API on virtual threads, with virtual reader threads (the
        // builder option for such applications; issue 34 item 8).
        val client = TicketingClient.builder().addresses(addr).token(System.getenv("TICKETING_TOKEN") ?: "")
            .virtualThreadReaders(lang == "java-virtual" && System.getenv("BENCH_PLATFORM_READER") == null).build()
        client.use { cl ->
            if (lang == "java-virtual") {
                // The blocking API on virtual threads (JDK 21+; the client's floor stays Java 17).
                val vt = virtualThreadExecutorFactory()
                if (vt == null) {
                    System.err.println("bench: virtual threads need JDK 21+, this is ${System.getProperty("java.version")}")
                    return
                }
                blocking(cl, 8, 1.0, vt) // JIT warm-up (not reported)
                for (callers in intArrayOf(64, 1)) {
                    report("java", "virtual-thr", callers, seconds, measured { blocking(cl, callers, seconds, vt) })
                }
                return
            }
            // JIT warm-up (not reported): the first configuration would otherwise pay for it.
            blocking(cl, 8, 1.0)
            coroutines(cl, 8, 1.0)
            if (lang != "kotlin") {
                for (callers in intArrayOf(64, 1)) {
                    report("java", "blocking", callers, seconds, measured { blocking(cl, callers, seconds) })
                }
                for (callers in intArrayOf(64, 1)) {
                    report("java", "async", callers, seconds, measured { async(cl, callers, seconds) })
                }
            }
            if (lang != "java") {
                for (callers in intArrayOf(64, 1)) {
                    report("kotlin", "coroutines", callers, seconds, measured { coroutines(cl, callers, seconds) })
                }
            }
        }
    }

    private fun key(lang: String, i: Int) = "bench/$lang/$i"

    private val os = java.lang.management.ManagementFactory.getOperatingSystemMXBean() as? com.sun.management.OperatingSystemMXBean
    private var cpuMark = 0L

    /** Marks the process CPU time at the start of a configuration. */
    private fun <T> measured(f: () -> T): T {
        cpuMark = os?.processCpuTime ?: 0L
        return f()
    }

    private fun report(lang: String, api: String, callers: Int, seconds: Double, pairs: Long) {
        // The client's CPU per pair (all threads of this process): a figure that a loaded machine
        // disturbs far less than pairs/s. On stderr, so stdout stays the BENCH lines.
        val cpu = (os?.processCpuTime ?: 0L) - cpuMark
        if (os != null && pairs > 0) {
            System.err.println("CPU {\"lang\":\"$lang\",\"api\":\"$api\",\"callers\":$callers,\"client_cpu_us_per_pair\":${"%.1f".format(java.util.Locale.ROOT, cpu / 1e3 / pairs)}}")
        }
        val pps = pairs / seconds
        println("BENCH {\"lang\":\"$lang\",\"api\":\"$api\",\"callers\":$callers,\"pairs\":$pairs,\"seconds\":$seconds,\"pairs_per_sec\":${"%.1f".format(java.util.Locale.ROOT, pps)}}")
        System.out.flush()
    }

    /** Executors.newVirtualThreadPerTaskExecutor, found reflectively (compiled for Java 17). */
    private fun virtualThreadExecutorFactory(): (() -> java.util.concurrent.ExecutorService)? {
        val m = try {
            java.util.concurrent.Executors::class.java.getMethod("newVirtualThreadPerTaskExecutor")
        } catch (e: NoSuchMethodException) {
            return null
        }
        return { m.invoke(null) as java.util.concurrent.ExecutorService }
    }

    private fun blocking(
        cl: TicketingClient,
        callers: Int,
        seconds: Double,
        virtual: (() -> java.util.concurrent.ExecutorService)? = null,
    ): Long {
        val end = System.nanoTime() + (seconds * 1e9).toLong()
        val count = AtomicLong()
        val body = { i: Int ->
            Runnable {
                val k = key(if (virtual != null) "java-virtual" else "java", i)
                while (System.nanoTime() < end) {
                    cl.acquire(k, lease, wait).close()
                    count.incrementAndGet()
                }
            }
        }
        if (virtual != null) {
            val ex = virtual()
            val fs = (0 until callers).map { ex.submit(body(it)) }
            fs.forEach { it.get() }
            ex.shutdown()
            return count.get()
        }
        val threads = (0 until callers).map { i -> Thread(body(i)).also { it.start() } }
        threads.forEach { it.join() }
        return count.get()
    }

    private fun async(cl: TicketingClient, callers: Int, seconds: Double): Long {
        val end = System.nanoTime() + (seconds * 1e9).toLong()
        val count = AtomicLong()
        fun loop(k: String, done: CompletableFuture<Unit>) {
            if (System.nanoTime() >= end) {
                done.complete(Unit)
                return
            }
            cl.acquireAsync(k, lease, wait).thenCompose { it.releaseAsync() }.whenComplete { _, e ->
                if (e != null) done.completeExceptionally(e) else {
                    count.incrementAndGet()
                    loop(k, done)
                }
            }
        }
        val all = (0 until callers).map { i -> CompletableFuture<Unit>().also { loop(key("java-async", i), it) } }
        all.forEach { it.join() }
        return count.get()
    }

    private fun coroutines(cl: TicketingClient, callers: Int, seconds: Double): Long {
        val end = System.nanoTime() + (seconds * 1e9).toLong()
        val count = AtomicLong()
        runBlocking(Dispatchers.Default) {
            repeat(callers) { i ->
                launch {
                    val k = key("kotlin", i)
                    while (System.nanoTime() < end) {
                        cl.acquire(k, 10.seconds, 5.seconds).releaseSuspending()
                        count.incrementAndGet()
                    }
                }
            }
        }
        return count.get()
    }
}
