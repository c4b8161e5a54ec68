using System;

namespace Ticketing
{
    /// <summary>Base of every error the client throws, except LockTimeoutException (a TimeoutException), TicketingArgumentException (an ArgumentException), ObjectDisposedException and OperationCanceledException.</summary>
    public class TicketingException : Exception
    {
        /// <summary>Creates it.</summary>
        public TicketingException(string message, Exception inner = null) : base(message, inner) { }
    }

    /// <summary>
    /// Not acquired within the wait (server T); thrown by Acquire, never by TryAcquire. A
    /// System.TimeoutException (as TicketingArgumentException is an ArgumentException), so code
    /// that handles timeouts generically catches it; it is not a TicketingException.
    /// </summary>
    public class LockTimeoutException : TimeoutException
    {
        /// <summary>Creates it.</summary>
        public LockTimeoutException(string message) : base(message) { }
    }

    /// <summary>The server refused at once (B): definitely not acquired, not queued; never retried.</summary>
    public class LockBusyException : TicketingException
    {
        /// <summary>Why: QueueFull, Overloaded, ClockUnhealthy, ShuttingDown or NoQuorum.</summary>
        public Code Code { get; private set; }
        /// <summary>Creates it.</summary>
        public LockBusyException(Code code, string message) : base(message) { Code = code; }
    }

    /// <summary>
    /// The request was sent but no definite answer came (connection lost, or U). For an acquire
    /// the lock MAY be held: do not enter the critical section; its lease ends it. For a release:
    /// not confirmed within 5 s.
    /// </summary>
    public class IndeterminateException : TicketingException
    {
        /// <summary>Creates it.</summary>
        public IndeterminateException(string message, Exception inner = null) : base(message, inner) { }
    }

    /// <summary>A release was answered N: the key is free or held under another token.</summary>
    public class NotHolderException : TicketingException
    {
        /// <summary>Creates it.</summary>
        public NotHolderException(string message) : base(message) { }
    }

    /// <summary>
    /// Wrong or missing token, or the server failed to prove the token (an impostor). Named so
    /// that it never clashes with System.Security.Authentication.AuthenticationException.
    /// </summary>
    public class TicketingAuthenticationException : TicketingException
    {
        /// <summary>The REJECT code (AuthFailed, BadHandshake), or null when the server failed its proof.</summary>
        public Code? Code { get; private set; }
        /// <summary>Creates it.</summary>
        public TicketingAuthenticationException(string message, Exception inner = null, Code? code = null) : base(message, inner)
        {
            Code = code;
            var a = inner as TicketingAuthenticationException;
            if (code == null && a != null) Code = a.Code;
        }
    }

    /// <summary>No connection to any server within the budget; nothing was sent.</summary>
    public class TicketingConnectionException : TicketingException
    {
        /// <summary>Creates it.</summary>
        public TicketingConnectionException(string message, Exception inner = null) : base(message, inner) { }
    }

    /// <summary>
    /// The TLS handshake or certificate verification failed, or TLS is configured on one side
    /// only ("the server requires TLS", "the server does not speak TLS": protocol.md §12.4).
    /// </summary>
    public class TicketingTlsException : TicketingConnectionException
    {
        /// <summary>Creates it.</summary>
        public TicketingTlsException(string message, Exception inner = null) : base(message, inner)
        {
            var t = inner as TicketingTlsException;
            if (t != null) Config = t.Config;
        }

        internal TicketingTlsException(string message, Exception inner, bool config) : base(message, inner) { Config = config; }

        /// <summary>Retrying will not cure it (a TLS mismatch, a certificate refused): waiting calls fail at once (R5).</summary>
        internal bool Config { get; private set; }
    }

    /// <summary>
    /// The grant left less of the lease than the acquire's minimum working time (R14); the
    /// client released it. Not acquired.
    /// </summary>
    public class InsufficientLeaseException : TicketingException
    {
        /// <summary>Creates it.</summary>
        public InsufficientLeaseException(string message) : base(message) { }
    }

    /// <summary>
    /// The call needs a protocol 1.1 feature (key sets) that the connection's server does not
    /// announce (a 1.0 server); nothing was sent.
    /// </summary>
    public class TicketingUnsupportedException : TicketingException
    {
        /// <summary>Creates it.</summary>
        public TicketingUnsupportedException(string message) : base(message) { }
    }

    /// <summary>A cluster kept answering M (no leader elected, or unreachable); nothing executed.</summary>
    public class NoLeaderException : TicketingConnectionException
    {
        /// <summary>Creates it.</summary>
        public NoLeaderException(string message) : base(message) { }
    }

    /// <summary>The peer broke the protocol.</summary>
    public class TicketingProtocolException : TicketingException
    {
        /// <summary>Creates it.</summary>
        public TicketingProtocolException(string message, Exception inner = null) : base(message, inner) { }
    }

    /// <summary>The server answered E for a reason other than the arguments (NotPermitted, Internal).</summary>
    public class TicketingServerException : TicketingException
    {
        /// <summary>The §4 code.</summary>
        public Code Code { get; private set; }
        /// <summary>Creates it.</summary>
        public TicketingServerException(Code code, string message) : base(message) { Code = code; }
    }

    /// <summary>
    /// A bad key, lease or wait: checked before anything is sent (Code null), or refused by the
    /// server's limits (Code BadKey, BadLease, BadWait, BadFlags).
    /// </summary>
    public class TicketingArgumentException : ArgumentException
    {
        /// <summary>The server's code, or null for the client's own check.</summary>
        public Code? Code { get; private set; }
        /// <summary>Creates it.</summary>
        public TicketingArgumentException(string message, string paramName, Code? code = null) : base(message, paramName) { Code = code; }
    }
}
