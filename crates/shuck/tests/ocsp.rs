//! OCSP stapling against a real responder (`openssl ocsp -port` with a test CA), checked
//! with `openssl s_client -status`: fetched and refreshed with --ocsp-dir, given with
//! --ocsp-resp-file, and a response that fails its checks is not stapled, and logged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// A CA, a server certificate it signs naming the responder in its AIA, and a responder.
struct Pki {
    dir: TempDir,
    /// Server certificate, then the CA, then the key.
    pem: PathBuf,
    ocsp_port: u16,
}

fn openssl(dir: &TempDir, cmd: &str) {
    sh(&format!("cd {} && {cmd} 2>/dev/null", dir.0.display()));
}

fn pki() -> Pki {
    assert!(require("openssl", "openssl"));
    let dir = TempDir::new("ocsp");
    let ocsp_port = free_port();
    for ca in ["ca", "rogue"] {
        openssl(&dir, &format!(
            "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout {ca}.key \
             -out {ca}.crt -days 3 -subj '/CN=OCSP test {ca}' \
             -addext basicConstraints=critical,CA:true -addext keyUsage=critical,keyCertSign,cRLSign"
        ));
    }
    std::fs::write(
        dir.path("server.ext"),
        format!(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n\
             subjectAltName=DNS:localhost\nauthorityInfoAccess=OCSP;URI:http://127.0.0.1:{ocsp_port}/\n"
        ),
    )
    .unwrap();
    for name in ["server", "other"] {
        openssl(
            &dir,
            &format!(
            "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout {name}.key \
             -out {name}.csr -subj /CN=localhost && openssl x509 -req -in {name}.csr -CA ca.crt \
             -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext -out {name}.crt \
             && cat {name}.crt ca.crt {name}.key > {name}.pem"
        ),
        );
    }
    // The responder's database: both certificates valid.
    let mut index = String::new();
    for name in ["server", "other"] {
        let serial = sh_out(&format!(
            "openssl x509 -in {} -noout -serial",
            dir.path(&format!("{name}.crt")).display()
        ));
        let serial = serial.trim().trim_start_matches("serial=");
        index.push_str(&format!(
            "V\t301231235959Z\t\t{serial}\tunknown\t/CN=localhost\n"
        ));
    }
    std::fs::write(dir.path("index.txt"), index).unwrap();
    // Both certificates are for localhost: let the database hold two of the same subject.
    std::fs::write(dir.path("index.txt.attr"), "unique_subject = no\n").unwrap();
    let pem = dir.path("server.pem");
    Pki {
        dir,
        pem,
        ocsp_port,
    }
}

/// `openssl ocsp` answering on the port, signing with `key` (the CA's, or a rogue one).
struct Responder(Child);

impl Responder {
    fn start(pki: &Pki, signer: &str) -> Responder {
        Self::start_under(pki, signer, &[])
    }

    /// A responder whose clock is two days behind (libfaketime preloaded into openssl
    /// itself, so that the child killed on drop is the responder): its responses, valid
    /// one day, are already stale.
    fn start_two_days_ago(pki: &Pki, signer: &str) -> Option<Responder> {
        if !require("faketime", "faketime") {
            return None;
        }
        let lib = sh_out("dpkg -L libfaketime | grep '/libfaketime.so.1$'");
        let lib = lib.trim();
        assert!(!lib.is_empty(), "libfaketime.so.1 not found");
        Some(Self::start_under(
            pki,
            signer,
            &[("LD_PRELOAD", lib), ("FAKETIME", "-2d")],
        ))
    }

    fn start_under(pki: &Pki, signer: &str, env: &[(&str, &str)]) -> Responder {
        let child = Command::new("openssl")
            .envs(env.iter().copied())
            .current_dir(&pki.dir.0)
            .args(["ocsp", "-index", "index.txt", "-port"])
            .arg(pki.ocsp_port.to_string())
            .args([
                "-rsigner",
                &format!("{signer}.crt"),
                "-rkey",
                &format!("{signer}.key"),
            ])
            .args(["-CA", "ca.crt", "-ndays", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Wait for its listening socket without connecting: openssl ocsp serves one
        // connection at a time and waits for ever on one that sends no request.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sh_out(&format!("ss -ltnH 'sport = :{}'", pki.ocsp_port)).contains("LISTEN") {
            assert!(Instant::now() < deadline, "openssl ocsp did not start");
            thread::sleep(Duration::from_millis(50));
        }
        Responder(child)
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What `openssl s_client -status` says of the stapled response.
fn status(port: u16) -> String {
    sh_out(&format!(
        "openssl s_client -connect 127.0.0.1:{port} -servername localhost -status </dev/null 2>&1"
    ))
}

/// Waits up to 5 s for a good staple (a restaple is applied by the main thread just after
/// the fetch).
fn wait_stapled(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !stapled_good(port) {
        assert!(Instant::now() < deadline, "not stapled: {}", status(port));
        thread::sleep(Duration::from_millis(100));
    }
}

fn stapled_good(port: u16) -> bool {
    let s = status(port);
    s.contains("OCSP Response Status: successful") && s.contains("Cert Status: good")
}

#[test]
fn ocsp_dir_fetches_staples_caches_and_refreshes() {
    let pki = pki();
    let _responder = Responder::start(&pki, "ca");
    let cache = TempDir::new("ocsp-cache");
    let origin = Origin::echo();
    let shuck = Shuck::start(&[
        "-b",
        &origin.addr(),
        "--ocsp-dir",
        cache.0.to_str().unwrap(),
        "--ocsp-refresh-interval",
        "2",
        pki.pem.to_str().unwrap(),
    ]);
    assert!(
        shuck.wait_log("OCSP: fetched a good response", Duration::from_secs(10)),
        "{}",
        shuck.log()
    );
    wait_stapled(shuck.port);
    // Cached for the next start.
    let cached: Vec<_> = std::fs::read_dir(&cache.0).unwrap().collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    // Refreshed on schedule (every 2 s here).
    let deadline = Instant::now() + Duration::from_secs(10);
    while shuck.log().matches("OCSP: fetched a good response").count() < 2 {
        assert!(Instant::now() < deadline, "no refresh: {}", shuck.log());
        thread::sleep(Duration::from_millis(100));
    }
    drop(shuck);

    // A restart with the responder down staples the cached response at once.
    drop(_responder);
    let shuck = Shuck::start(&[
        "-b",
        &origin.addr(),
        "--ocsp-dir",
        cache.0.to_str().unwrap(),
        pki.pem.to_str().unwrap(),
    ]);
    assert!(
        shuck.log().contains("OCSP: stapling the cached response"),
        "{}",
        shuck.log()
    );
    assert!(stapled_good(shuck.port), "{}", status(shuck.port));
}

#[test]
fn ocsp_resp_file_is_checked_before_stapling() {
    let pki = pki();
    let origin = Origin::echo();
    let get = |signer: &str, cert: &str, out: &str| {
        let r = Responder::start(&pki, signer);
        openssl(&pki.dir, &format!(
            "openssl ocsp -issuer ca.crt -cert {cert}.crt -url http://127.0.0.1:{}/ -respout {out} -noverify",
            pki.ocsp_port
        ));
        drop(r);
        pki.dir.path(out).to_str().unwrap().to_owned()
    };
    let good = get("ca", "server", "good.der");
    let rogue = get("rogue", "server", "rogue.der");
    let other = get("ca", "other", "other.der");
    let pem = pki.pem.to_str().unwrap();

    // The same good response, judged a day and a half later (the responder said -ndays 1):
    // stale, and so not stapled.
    {
        use rustls::pki_types::pem::PemObject;
        let chain: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(&pki.pem)
            .unwrap()
            .map(|c| c.unwrap())
            .collect();
        let der = std::fs::read(&good).unwrap();
        let now = std::time::SystemTime::now();
        assert!(shuck::tls::ocsp::verify::verify(&der, &chain[0], &chain[1], now, None).is_ok());
        let later = now + Duration::from_secs(36 * 3600);
        let e =
            shuck::tls::ocsp::verify::verify(&der, &chain[0], &chain[1], later, None).unwrap_err();
        assert!(e.to_string().starts_with("stale"), "{e}");
        // And about the wrong issuer: refused.
        assert!(shuck::tls::ocsp::verify::verify(&der, &chain[0], &chain[0], now, None).is_err());
    }

    // A good response for this certificate is stapled.
    let shuck = Shuck::start(&[
        "-b",
        &origin.addr(),
        "--ocsp-resp-file",
        &format!("{pem}={good}"),
        pem,
    ]);
    assert!(stapled_good(shuck.port), "{}", status(shuck.port));
    drop(shuck);

    // Signed by a key the issuer never vouched for, or about another certificate: not
    // stapled, and the log says why.
    for (resp, why) in [
        (&rogue, "signature does not verify"),
        (&other, "another certificate"),
    ] {
        let shuck = Shuck::start(&[
            "-b",
            &origin.addr(),
            "--ocsp-resp-file",
            &format!("{pem}={resp}"),
            pem,
        ]);
        assert!(
            shuck.log().contains("not stapled") && shuck.log().contains(why),
            "{}",
            shuck.log()
        );
        let s = status(shuck.port);
        assert!(s.contains("OCSP response: no response sent"), "{s}");
    }

    // With ocsp-verify-staple on (hitch's key, globally or in the pem-file block), a response
    // that does not verify is an error at --test and at start, as in hitch; a good one passes.
    let (code, err) = run_to_exit(&[
        "--ocsp-verify-staple",
        "--ocsp-resp-file",
        &format!("{pem}={rogue}"),
        "--test",
        pem,
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&rogue) && err.contains("does not verify") && err.contains("signature"),
        "{err}"
    );
    for (resp, verify, ok) in [
        (&other, "on", false),
        (&good, "on", true),
        (&other, "off", true),
    ] {
        let conf = pki.dir.path("staple.conf");
        std::fs::write(
            &conf,
            format!(
                "backend = \"{}\"\npem-file = {{\n cert = \"{pem}\"\n ocsp-resp-file = \"{resp}\"\n ocsp-verify-staple = {verify}\n}}\n",
                origin.addr()
            ),
        )
        .unwrap();
        let (code, err) = run_to_exit(&["--config", conf.to_str().unwrap(), "--test"]);
        if ok {
            assert_eq!(code, Some(0), "{resp} {verify}: {err}");
        } else {
            assert_eq!(code, Some(1), "{resp} {verify}: {err}");
            assert!(err.contains("another certificate"), "{err}");
        }
    }

    // Garbage is refused the same way; a PEM that is not one of the certificates is an error.
    let junk = pki.dir.path("junk.der");
    std::fs::write(&junk, b"not DER").unwrap();
    let shuck = Shuck::start(&[
        "-b",
        &origin.addr(),
        "--ocsp-resp-file",
        &format!("{pem}={}", junk.display()),
        pem,
    ]);
    assert!(
        shuck.log().contains("malformed OCSP data"),
        "{}",
        shuck.log()
    );
    drop(shuck);
    let (code, err) = run_to_exit(&["--ocsp-resp-file", &format!("/nope.pem={good}"), pem]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("/nope.pem") && err.contains("not one of the certificates"),
        "{err}"
    );
}

/// hitch's test 14: a response signed by a responder the CA delegated to is checked, with
/// ocsp-verify-staple on, against a trust store (the system's, SSL_CERT_FILE, or shuck's own
/// --ocsp-verify-ca): without the CA there, --test fails; with it, it passes; off, the
/// response is stapled as before.
#[test]
fn a_delegated_responder_must_chain_to_a_trusted_root() {
    let pki = pki();
    let origin = Origin::echo();
    std::fs::write(
        pki.dir.path("responder.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=OCSPSigning\n",
    )
    .unwrap();
    openssl(
        &pki.dir,
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout responder.key \
         -out responder.csr -subj '/CN=OCSP test responder' && openssl x509 -req -in responder.csr \
         -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile responder.ext -out responder.crt",
    );
    for (signer, out) in [("responder", "delegated.der"), ("ca", "direct.der")] {
        let r = Responder::start(&pki, signer);
        openssl(&pki.dir, &format!(
            "openssl ocsp -issuer ca.crt -cert server.crt -url http://127.0.0.1:{}/ -respout {out} -noverify",
            pki.ocsp_port
        ));
        drop(r);
    }
    let delegated = pki.dir.path("delegated.der");
    assert!(
        delegated.exists(),
        "no response from the delegated responder"
    );
    let pem = pki.pem.to_str().unwrap();
    let spec = format!("{pem}={}", delegated.display());
    let ca = pki.dir.path("ca.crt");
    let test_with = |spec: &str, extra: &[&str], env: Option<&PathBuf>| {
        let mut cmd = Command::new(BIN);
        cmd.env_remove("SSL_CERT_FILE").env_remove("SSL_CERT_DIR");
        if let Some(f) = env {
            cmd.env("SSL_CERT_FILE", f);
        }
        let out = cmd
            .args(["-b", &origin.addr(), "--ocsp-resp-file", spec, "--test"])
            .args(extra)
            .arg(pem)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let test = |extra: &[&str], env: Option<&PathBuf>| test_with(&spec, extra, env);
    // The system's store does not hold the test CA.
    let (code, err) = test(&["--ocsp-verify-staple"], None);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("OCSP test responder") && err.contains("does not chain to a trusted root"),
        "{err}"
    );
    let (code, err) = test(&["--ocsp-verify-staple"], Some(&ca));
    assert_eq!(code, Some(0), "SSL_CERT_FILE: {err}");
    let ca_s = ca.to_str().unwrap();
    let (code, err) = test(&["--ocsp-verify-staple", "--ocsp-verify-ca", ca_s], None);
    assert_eq!(code, Some(0), "--ocsp-verify-ca: {err}");
    // The same as configuration keys, with hitch's pem-file block.
    let conf = pki.dir.path("verify-ca.conf");
    std::fs::write(
        &conf,
        format!(
            "backend = \"{}\"\nocsp-verify-ca = \"{}\"\npem-file = {{\n cert = \"{pem}\"\n ocsp-resp-file = \"{}\"\n ocsp-verify-staple = on\n}}\n",
            origin.addr(),
            ca.display(),
            delegated.display()
        ),
    )
    .unwrap();
    let out = Command::new(BIN)
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .args(["--config", conf.to_str().unwrap(), "--test"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "ocsp-verify-ca key: {err}");
    // A CA file that is not one, and another CA: refused with the reason.
    let rogue = pki.dir.path("rogue.crt");
    let (code, err) = test(
        &[
            "--ocsp-verify-staple",
            "--ocsp-verify-ca",
            rogue.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("does not chain to a trusted root"), "{err}");
    let (code, err) = test(
        &[
            "--ocsp-verify-staple",
            "--ocsp-verify-ca",
            pki.dir.path("index.txt").to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--ocsp-verify-ca") && err.contains("holds no certificate"),
        "{err}"
    );
    let (code, err) = test(&[], None);
    assert_eq!(code, Some(0), "ocsp-verify-staple off: {err}");
    // No readable store at all: a delegated responder cannot be trusted, but a response the
    // issuer signed itself needs none (hitch staples it too).
    let nowhere = pki.dir.path("no-such-bundle.pem");
    let (code, err) = test(&["--ocsp-verify-staple"], Some(&nowhere));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no trust anchors"), "{err}");
    let direct = format!("{pem}={}", pki.dir.path("direct.der").display());
    let (code, err) = test_with(&direct, &["--ocsp-verify-staple"], Some(&nowhere));
    assert_eq!(code, Some(0), "issuer-signed, no store: {err}");
    let shuck = Shuck::start(&["-b", &origin.addr(), "--ocsp-resp-file", &spec, pem]);
    assert!(stapled_good(shuck.port), "{}", status(shuck.port));
    drop(shuck);

    // Fetched by --ocsp-dir from the delegated responder: the same trust decides.
    let _responder = Responder::start(&pki, "responder");
    let cache = TempDir::new("ocsp-cache-delegated");
    let cache = cache.0.to_str().unwrap().to_owned();
    let base = [
        "-b",
        &origin.addr(),
        "--ocsp-dir",
        &cache,
        "--ocsp-verify-staple",
    ];
    let shuck = Shuck::start(&[&base[..], &[pem]].concat());
    assert!(
        shuck.wait_log("does not chain to a trusted root", Duration::from_secs(10)),
        "{}",
        shuck.log()
    );
    assert!(!stapled_good(shuck.port), "{}", status(shuck.port));
    drop(shuck);
    let shuck = Shuck::start(&[&base[..], &["--ocsp-verify-ca", ca_s, pem]].concat());
    assert!(
        shuck.wait_log("OCSP: fetched a good response", Duration::from_secs(10)),
        "{}",
        shuck.log()
    );
    wait_stapled(shuck.port);
}

#[test]
fn a_stale_staple_is_not_fatal_with_ocsp_verify_staple_and_a_fresh_one_follows() {
    let pki = pki();
    let origin = Origin::echo();
    let pem = pki.pem.to_str().unwrap();
    let Some(old) = Responder::start_two_days_ago(&pki, "ca") else {
        return;
    };
    openssl(&pki.dir, &format!(
        "openssl ocsp -issuer ca.crt -cert server.crt -url http://127.0.0.1:{}/ -respout stale.der -noverify",
        pki.ocsp_port
    ));
    drop(old);
    let stale = pki.dir.path("stale.der").to_str().unwrap().to_owned();
    // hitch checks signature, certificate and status at load, not time: --test passes,
    // with a warning naming the file.
    let (code, err) = run_to_exit(&[
        "--ocsp-verify-staple",
        "--ocsp-resp-file",
        &format!("{pem}={stale}"),
        "-b",
        &origin.addr(),
        "--test",
        pem,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("stale.der") && err.contains("stale: nextUpdate passed"),
        "{err}"
    );
    // At start: the stale staple is not taken, and --ocsp-dir fetches a fresh response.
    let _responder = Responder::start(&pki, "ca");
    let cache = TempDir::new("ocsp-stale-cache");
    let shuck = Shuck::start(&[
        "-b",
        &origin.addr(),
        "--ocsp-verify-staple",
        "--ocsp-resp-file",
        &format!("{pem}={stale}"),
        "--ocsp-dir",
        cache.0.to_str().unwrap(),
        pem,
    ]);
    assert!(
        shuck.log().contains("not stapled: stale"),
        "{}",
        shuck.log()
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !stapled_good(shuck.port) {
        assert!(
            Instant::now() < deadline,
            "no fresh staple: {}",
            shuck.log()
        );
        thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_responder_that_never_answers_holds_back_no_other_staple() {
    let pki = pki();
    let _responder = Responder::start(&pki, "ca");
    // A second certificate whose responder accepts connections and never answers.
    let hung = fresh_listener();
    let hung_port = hung.local_addr().unwrap().port();
    std::fs::write(
        pki.dir.path("hung.ext"),
        format!(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n\
             subjectAltName=DNS:hung.example\nauthorityInfoAccess=OCSP;URI:http://127.0.0.1:{hung_port}/\n"
        ),
    )
    .unwrap();
    openssl(
        &pki.dir,
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout hung.key \
         -out hung.csr -subj /CN=hung.example && openssl x509 -req -in hung.csr -CA ca.crt \
         -CAkey ca.key -CAcreateserial -days 2 -extfile hung.ext -out hung.crt \
         && cat hung.crt ca.crt hung.key > hung.pem",
    );
    let cache = TempDir::new("ocsp-cache-hung");
    let origin = Origin::echo();
    // The hung certificate comes first: fetched one after the other, the good one would
    // wait for the 20 s response timeout.
    let shuck = Shuck::start(&[
        "-b",
        &origin.addr(),
        "--ocsp-dir",
        cache.0.to_str().unwrap(),
        "--ocsp-resp-tmo",
        "20",
        pki.dir.path("hung.pem").to_str().unwrap(),
        pki.pem.to_str().unwrap(),
    ]);
    assert!(
        shuck.wait_log("OCSP: fetched a good response", Duration::from_secs(8)),
        "{}",
        shuck.log()
    );
    let log = shuck.log();
    let fetched = log
        .lines()
        .find(|l| l.contains("fetched a good response"))
        .unwrap();
    assert!(fetched.contains("server.pem"), "{fetched}");
    // The hung fetch is still waiting: nothing said of it yet.
    assert!(!log.contains("retrying"), "{log}");
    drop(hung);
}
