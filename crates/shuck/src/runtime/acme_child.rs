//! The ACME client process's entry point: what the forked child runs (a current-thread
//! runtime around `acme::client`, its link to the master over the channel).

use nix::sys::signal::Signal;

use super::channel::{Channel, Msg};

/// The ACME client process's life: its channel to this master, read on a thread of its
/// own (the process is single-threaded until now, as it was forked).
pub(super) fn acme_client(settings: crate::acme::Settings, chan: Channel) -> i32 {
    // It dies with its master, as the worker does (its writes are renames: never half a
    // file); a new master starts its own.
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
        tracing::error!(name: "acme_error", error = %e, "ACME: {e}");
        return 1;
    }
    let reader = match chan.try_clone() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(name: "acme_error", error = %e, "ACME: {e}");
            return 1;
        }
    };
    let (tx, inbox) = tokio::sync::mpsc::unbounded_channel();
    let spawned = std::thread::Builder::new()
        .name("shuck-acme-link".into())
        .spawn(move || {
            while let Ok(m) = reader.recv() {
                let inbound = match m {
                    Msg::AcmeAnswered(a) => crate::acme::client::Inbound::Answered(a),
                    Msg::Farm(body) => crate::acme::client::Inbound::Farm(body),
                    _ => continue,
                };
                if tx.send(inbound).is_err() {
                    break;
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(name: "acme_error", error = %e, "ACME: {e}");
        return 1;
    }
    let link = crate::acme::client::Link {
        send: std::rc::Rc::new(move |e| chan.send(&Msg::Acme(e)).map_err(|e| e.to_string())),
        inbox,
    };
    crate::acme::client::run(settings, link)
}
