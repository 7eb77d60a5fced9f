//! Work the server does for itself, kept behind the calls it answers.
//!
//! The background embedder's forward passes are the one long CPU task
//! the server starts on its own (a backlog of 100,000 memories keeps every
//! core busy for minutes, `zm-embed` spreading a batch over them). Run at
//! the same priority as the request threads, they take half of every core
//! from a recall that arrives meanwhile. [`run`] gives such work a thread
//! of its own at a lower priority (a higher nice value on Linux, which the
//! threads it starts inherit), so a request's threads go first and the
//! backlog takes what they leave. A thread that dies after its work, not
//! one of the runtime's blocking pool: an unprivileged process cannot
//! raise a thread's priority back, and the pool's threads go on to embed
//! recall's queries.
//!
//! The embedder hands a batch here only when its model runs the batch on
//! threads of its own (`Encoder::batches_on_threads_of_their_own`): a
//! model on a pool that outlives the call (candle's rayon pool, the
//! fallback) would have the pool started lowered, and recall's queries
//! embedded on it at that priority too.
//!
//! Only work that holds no lock a request waits on goes here: a thread
//! kept waiting while it held the vector index's read lock would hold up
//! a refresh waiting to write, and every recall behind that.

/// The nice value of background threads (Linux; nothing elsewhere): far
/// enough below the default 0 that a request's thread takes about nine
/// tenths of a core the two want at once, but not the lowest, so a server
/// busy with requests all the time still works through its backlog.
pub(crate) const BACKGROUND_NICE: i32 = 10;

/// Run `work` on a thread of its own named `name`, at
/// [`BACKGROUND_NICE`]; its answer, or `None` when the thread could not
/// start or `work` panicked (logged here).
pub(crate) async fn run<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            lower_this_thread();
            // A panic drops `tx`: the receiver below reads it as an error.
            let _ = tx.send(work());
        });
    if let Err(e) = spawned {
        tracing::error!(target: "zm_store", error = %e, thread = name, "a background thread did not start");
        return None;
    }
    match rx.await {
        Ok(answer) => Some(answer),
        Err(_) => {
            tracing::error!(target: "zm_store", thread = name, "a background thread panicked");
            None
        }
    }
}

/// Move the calling thread to [`BACKGROUND_NICE`] (never back up, were
/// the process started nicer still). A refusal is logged and the work
/// runs at the priority it has.
fn lower_this_thread() {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{getpriority_process, setpriority_process};
        // On Linux the nice value is each thread's own; by thread id, this
        // thread's alone (and the threads it starts inherit it).
        let me = Some(rustix::thread::gettid());
        let now = getpriority_process(me).unwrap_or(0);
        if now < BACKGROUND_NICE
            && let Err(e) = setpriority_process(me, BACKGROUND_NICE)
        {
            tracing::debug!(target: "zm_store", error = %e, "a background thread kept its priority");
        }
    }
}

/// The calling thread's nice value, for tests (0 where there is none).
#[cfg(test)]
pub(crate) fn nice_of_this_thread() -> i32 {
    #[cfg(target_os = "linux")]
    {
        rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap_or(0)
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The work runs lowered, and so do the threads it starts (the
    /// model's per-core threads); the caller's thread is not touched.
    #[tokio::test]
    async fn work_runs_lowered_and_the_caller_does_not() {
        let before = nice_of_this_thread();
        let (own, started) = run("zm-test-background", || {
            let started = std::thread::spawn(nice_of_this_thread).join().unwrap();
            (nice_of_this_thread(), started)
        })
        .await
        .expect("the work's answer");
        if cfg!(target_os = "linux") {
            assert!(own >= BACKGROUND_NICE, "the work's thread at nice {own}");
            assert!(
                started >= BACKGROUND_NICE,
                "a thread it started at nice {started}"
            );
        }
        assert_eq!(
            nice_of_this_thread(),
            before,
            "the caller's thread kept its priority"
        );
    }

    /// A panic in the work is `None`, not a panic of the caller.
    #[tokio::test]
    async fn a_panic_is_none() {
        let answer: Option<()> = run("zm-test-background", || panic!("in the work")).await;
        assert!(answer.is_none());
    }
}
