using System;
using System.Collections.Generic;

namespace Ticketing
{
    /// <summary>TLS settings (file paths, PEM or PFX as Mono/.NET load them).</summary>
    public sealed class TicketingTlsOptions
    {
        /// <summary>CA certificate (PEM/DER) to verify the server with; null: the system store.</summary>
        public string CaFile { get; set; }
        /// <summary>Client certificate for mutual TLS: a PKCS#12 (.pfx/.p12) file.</summary>
        public string ClientCertificatePfx { get; set; }
        /// <summary>Password of ClientCertificatePfx.</summary>
        public string ClientCertificatePassword { get; set; }
        /// <summary>Name to verify; default: the address's host.</summary>
        public string ServerName { get; set; }
    }

    /// <summary>Options of a TicketingClient.</summary>
    public sealed class TicketingOptions
    {
        /// <summary>"host:port" of the server, or any subset of a cluster's nodes.</summary>
        public IList<string> Addresses { get; set; }
        /// <summary>The client token; null for none. Never logged.</summary>
        public string Token { get; set; }
        /// <summary>TLS, or null for plain TCP.</summary>
        public TicketingTlsOptions Tls { get; set; }
        /// <summary>Budget for connecting (per attempt, and for a call that finds no connection). Default 5 s.</summary>
        public TimeSpan ConnectTimeout { get; set; }
        /// <summary>
        /// Where the client logs (never a token). Default: TraceLogger.Instance (warnings and
        /// errors to System.Diagnostics.Trace). An ITicketingLogger whose IsEnabled returns false
        /// silences it.
        /// </summary>
        public ITicketingLogger Logger { get; set; }
        /// <summary>Optional extra sink receiving every message of every level as text (older form of Logger).</summary>
        public Action<string> Log { get; set; }

        /// <summary>
        /// The answer allowance (R2): an acquire written and not answered within its wait plus
        /// this, counted from its write, ends IndeterminateException and is withdrawn (a late
        /// grant is released). Default 3 s, as every official client.
        /// </summary>
        public TimeSpan AnswerAllowance { get; set; }
        /// <summary>
        /// The whole connection label (protocol 1.1, §12.3) shown to operators in admin locks;
        /// null: TicketingClient.DefaultLabel(AppName); "" sends none. Cut to 64 bytes.
        /// </summary>
        public string Label { get; set; }
        /// <summary>An application name in front of the default label: "&lt;app&gt; &lt;host&gt;/&lt;pid&gt; csharp/&lt;version&gt;".</summary>
        public string AppName { get; set; }

        /// <summary>Defaults: 5 s connect timeout, 3 s answer allowance, the default label.</summary>
        public TicketingOptions()
        {
            ConnectTimeout = TimeSpan.FromSeconds(5);
            AnswerAllowance = TimeSpan.FromSeconds(3);
        }
    }

    /// <summary>Per-acquire options.</summary>
    public sealed class AcquireOptions
    {
        /// <summary>
        /// The minimum working time (R14): when less of the lease is left after the grant (the
        /// conservative local deadline), the client releases it and throws
        /// InsufficientLeaseException. Null: any grant.
        /// </summary>
        public TimeSpan? MinRemaining { get; set; }
    }
}
