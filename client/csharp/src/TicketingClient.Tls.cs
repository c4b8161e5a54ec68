using System;
using System.Collections.Generic;
using System.Linq;
using System.Net.Security;
using System.Security.Cryptography.X509Certificates;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

namespace Ticketing
{
    // TLS settings and the verification of the server's certificate (a CA file and the name).
    public sealed partial class TicketingClient
    {
        internal readonly TicketingTlsOptions Tls;
        internal readonly X509Certificate2 ClientCertificate;
        readonly X509Certificate2 caCert;
        internal bool ValidateServerCertificate(string serverName, X509Certificate cert, X509Chain chain, SslPolicyErrors errors)
        {
            if ((errors & SslPolicyErrors.RemoteCertificateNameMismatch) != 0 || cert == null) return false;
            // Mono does not always report a name mismatch next to chain errors: check the name here.
            if (!NameMatches(new X509Certificate2(cert), serverName)) return false;
            if (caCert == null) return errors == SslPolicyErrors.None;
            var ch = new X509Chain();
            ch.ChainPolicy.RevocationMode = X509RevocationMode.NoCheck;
            ch.ChainPolicy.VerificationFlags = X509VerificationFlags.AllowUnknownCertificateAuthority;
            ch.ChainPolicy.ExtraStore.Add(caCert);
            if (!ch.Build(new X509Certificate2(cert))) return false;
            var root = ch.ChainElements[ch.ChainElements.Count - 1].Certificate;
            return root.Thumbprint == caCert.Thumbprint;
        }

        /// <summary>Whether the certificate names host (subjectAltName DNS or IP, else the CN).</summary>
        internal static bool NameMatches(X509Certificate2 cert, string host)
        {
            if (string.IsNullOrEmpty(host)) return false;
            System.Net.IPAddress ip;
            bool isIp = System.Net.IPAddress.TryParse(host, out ip);
            bool sawSan = false;
            foreach (var ext in cert.Extensions)
            {
                if (ext.Oid == null || ext.Oid.Value != "2.5.29.17") continue;
                sawSan = true;
                // DER: SEQUENCE OF GeneralName; dNSName is [2] (0x82), iPAddress is [7] (0x87).
                var d = ext.RawData;
                int i = 0;
                if (d.Length < 2 || d[i++] != 0x30) return false;
                int end = DerLen(d, ref i);
                end = Math.Min(d.Length, i + end);
                while (i + 2 <= end)
                {
                    byte tag = d[i++];
                    int len = DerLen(d, ref i);
                    if (len < 0 || i + len > end) return false;
                    if (tag == 0x82 && !isIp && HostMatches(Encoding.ASCII.GetString(d, i, len), host)) return true;
                    if (tag == 0x87 && isIp)
                    {
                        var b = new byte[len];
                        Buffer.BlockCopy(d, i, b, 0, len);
                        if (ip.GetAddressBytes().SequenceEqual(b)) return true;
                    }
                    i += len;
                }
            }
            if (sawSan) return false;
            var cn = cert.GetNameInfo(X509NameType.SimpleName, false);
            return !isIp && !string.IsNullOrEmpty(cn) && HostMatches(cn, host);
        }

        static int DerLen(byte[] d, ref int i)
        {
            if (i >= d.Length) return -1;
            int b = d[i++];
            if (b < 0x80) return b;
            int n = b & 0x7f, v = 0;
            if (n > 3) return -1;
            for (int k = 0; k < n && i < d.Length; k++) v = (v << 8) | d[i++];
            return v;
        }

        static bool HostMatches(string pattern, string host)
        {
            if (string.Equals(pattern, host, StringComparison.OrdinalIgnoreCase)) return true;
            int dot = host.IndexOf('.');
            return pattern.StartsWith("*.") && dot > 0 && string.Equals(pattern.Substring(1), host.Substring(dot), StringComparison.OrdinalIgnoreCase);
        }
    }
}
