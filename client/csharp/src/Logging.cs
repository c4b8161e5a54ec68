#define TRACE // Trace.TraceWarning is [Conditional("TRACE")]: compiled in whatever the build defines

using System;
using System.Diagnostics;

namespace Ticketing
{
    /// <summary>Severity of a client log message.</summary>
    public enum TicketingLogLevel
    {
        /// <summary>Routine events (a background release that succeeded).</summary>
        Debug,
        /// <summary>Notable events (following a new leader).</summary>
        Information,
        /// <summary>Something failed and the client carries on (a connect attempt, a lost connection, a failed background release).</summary>
        Warning,
        /// <summary>Something failed that the client cannot repair.</summary>
        Error,
    }

    /// <summary>
    /// Where the client logs: the shape of Microsoft.Extensions.Logging's ILogger without the
    /// dependency (adapt it in a few lines: IsEnabled maps the level, Log calls logger.Log). Set
    /// TicketingOptions.Logger; the default, TraceLogger, writes warnings and errors to
    /// System.Diagnostics.Trace. Messages never contain a token. Called on the client's threads:
    /// return quickly and never throw.
    /// </summary>
    public interface ITicketingLogger
    {
        /// <summary>Whether messages of level are wanted (the client skips formatting otherwise).</summary>
        bool IsEnabled(TicketingLogLevel level);

        /// <summary>One message; exception is the cause, or null.</summary>
        void Log(TicketingLogLevel level, string message, Exception exception);
    }

    /// <summary>
    /// The default logger: warnings and errors to System.Diagnostics.Trace (TraceWarning /
    /// TraceError; add a TraceListener, or configure one in app.config, to see them).
    /// </summary>
    public sealed class TraceLogger : ITicketingLogger
    {
        /// <summary>The shared instance.</summary>
        public static readonly TraceLogger Instance = new TraceLogger();

        /// <summary>Warning and above.</summary>
        public bool IsEnabled(TicketingLogLevel level) { return level >= TicketingLogLevel.Warning; }

        /// <summary>Writes to Trace.</summary>
        public void Log(TicketingLogLevel level, string message, Exception exception)
        {
            if (level >= TicketingLogLevel.Error) Trace.TraceError("{0}", message);
            else if (level == TicketingLogLevel.Warning) Trace.TraceWarning("{0}", message);
            else Trace.TraceInformation("{0}", message);
        }
    }
}
