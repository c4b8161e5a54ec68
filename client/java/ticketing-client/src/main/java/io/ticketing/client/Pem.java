package io.ticketing.client;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/** Builds an {@link SSLContext} from PEM files (CA bundle, certificate chain, PKCS#8 or SEC1 EC key). Internal. */
final class Pem {
    private Pem() {}

    private static final Pattern BLOCK = Pattern.compile("-----BEGIN ([A-Z0-9 ]+)-----([^-]+)-----END \\1-----");

    private static List<String[]> blocks(Path p) throws IOException {
        String s = Files.readString(p, StandardCharsets.US_ASCII);
        Matcher m = BLOCK.matcher(s);
        List<String[]> out = new ArrayList<>();
        while (m.find()) {
            out.add(new String[] {m.group(1), m.group(2).replaceAll("\\s", "")});
        }
        return out;
    }

    static SSLContext context(Path ca, Path cert, Path key) throws IOException, GeneralSecurityException {
        CertificateFactory cf = CertificateFactory.getInstance("X.509");
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        if (ca != null) {
            KeyStore ts = KeyStore.getInstance(KeyStore.getDefaultType());
            ts.load(null, null);
            int i = 0;
            for (Certificate c : cf.generateCertificates(new ByteArrayInputStream(Files.readAllBytes(ca)))) {
                ts.setCertificateEntry("ca" + i++, c);
            }
            tmf.init(ts);
        } else {
            tmf.init((KeyStore) null);
        }
        KeyManagerFactory kmf = null;
        if (cert != null && key != null) {
            Collection<? extends Certificate> chain = cf.generateCertificates(new ByteArrayInputStream(Files.readAllBytes(cert)));
            PrivateKey pk = privateKey(key);
            KeyStore ks = KeyStore.getInstance(KeyStore.getDefaultType());
            ks.load(null, null);
            char[] pw = new char[0];
            ks.setKeyEntry("client", pk, pw, chain.toArray(new Certificate[0]));
            kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
            kmf.init(ks, pw);
        }
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(kmf == null ? null : kmf.getKeyManagers(), tmf.getTrustManagers(), null);
        return ctx;
    }

    static PrivateKey privateKey(Path p) throws IOException, GeneralSecurityException {
        for (String[] b : blocks(p)) {
            byte[] der = Base64.getDecoder().decode(b[1]);
            if (b[0].equals("PRIVATE KEY")) {
                return pkcs8(der);
            }
            if (b[0].equals("EC PRIVATE KEY")) {
                return pkcs8(sec1ToPkcs8(der));
            }
        }
        throw new GeneralSecurityException("no PKCS#8 or EC private key in " + p);
    }

    private static PrivateKey pkcs8(byte[] der) throws GeneralSecurityException {
        GeneralSecurityException last = null;
        for (String alg : new String[] {"EC", "RSA", "Ed25519", "RSASSA-PSS"}) {
            try {
                return KeyFactory.getInstance(alg).generatePrivate(new PKCS8EncodedKeySpec(der));
            } catch (GeneralSecurityException e) {
                last = e;
            }
        }
        throw last;
    }

    // PKCS#8 wrapper of a SEC1 P-256 key: SEQ{INT 0, SEQ{id-ecPublicKey, prime256v1}, OCTET STRING sec1}.
    private static byte[] sec1ToPkcs8(byte[] sec1) {
        byte[] alg = {0x30, 0x13, 0x06, 0x07, 0x2a, (byte) 0x86, 0x48, (byte) 0xce, 0x3d, 0x02, 0x01,
            0x06, 0x08, 0x2a, (byte) 0x86, 0x48, (byte) 0xce, 0x3d, 0x03, 0x01, 0x07};
        ByteArrayOutputStream body = new ByteArrayOutputStream();
        body.writeBytes(new byte[] {0x02, 0x01, 0x00});
        body.writeBytes(alg);
        body.write(0x04);
        body.writeBytes(len(sec1.length));
        body.writeBytes(sec1);
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(0x30);
        out.writeBytes(len(body.size()));
        out.writeBytes(body.toByteArray());
        return out.toByteArray();
    }

    private static byte[] len(int n) {
        if (n < 128) {
            return new byte[] {(byte) n};
        }
        if (n < 256) {
            return new byte[] {(byte) 0x81, (byte) n};
        }
        return new byte[] {(byte) 0x82, (byte) (n >> 8), (byte) n};
    }
}
