//! Waiting for the device: natively a thread blocks (pollster, wgpu's poll); in a browser
//! nothing may block, and what WebGPU hands back (the adapter, a mapped buffer) arrives only
//! once the page's event loop runs. There the embedding installs a way to let it run from
//! inside a synchronous call ([`set_host_yield`]: cera-wasm suspends the WebAssembly stack
//! through JavaScript Promise Integration), and the backend's waits go round it until done.

use std::future::Future;

use crate::error::{Error, Result};

#[cfg(target_arch = "wasm32")]
static HOST_YIELD: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// On the web: `f` returns after letting the host's event loop run (its pending promises
/// settle, their callbacks run); the GPU backend calls it while it waits. Set once; later
/// calls keep the first.
#[cfg(target_arch = "wasm32")]
pub fn set_host_yield(f: fn()) {
    let _ = HOST_YIELD.set(f);
}

/// Lets the host run once, or says why a GPU cannot be waited for here.
#[cfg(target_arch = "wasm32")]
fn host_yield() -> Result<()> {
    let f = HOST_YIELD.get().ok_or_else(|| {
        Error::Gpu(
            "WebGPU answers only through the event loop, and this embedding set no way to \
             wait for it (cera-wasm's cera-webgpu.js does: load the model through it)"
                .into(),
        )
    })?;
    f();
    Ok(())
}

/// `fut`'s output: natively by blocking the thread; on the web by polling it between turns
/// of the host's event loop.
pub(super) fn block_on<F: Future>(fut: F) -> Result<F::Output> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        Ok(pollster::block_on(fut))
    }
    #[cfg(target_arch = "wasm32")]
    {
        let mut fut = std::pin::pin!(fut);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        loop {
            if let std::task::Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return Ok(v);
            }
            host_yield()?;
        }
    }
}

/// Waits for what a device callback sends on `rx`: natively `device` is polled until its queue
/// is idle, then the callback's message awaited (another thread's poll of a shared device may
/// be the one running it); on the web the host's event loop runs between tries.
pub(super) fn wait_for<T>(device: &wgpu::Device, rx: &std::sync::mpsc::Receiver<T>) -> Result<T> {
    let gone = || Error::Gpu("the GPU dropped a callback without running it".into());
    #[cfg(not(target_arch = "wasm32"))]
    {
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Gpu(format!("GPU device lost while waiting for it: {e}")))?;
        rx.recv().map_err(|_| gone())
    }
    #[cfg(target_arch = "wasm32")]
    {
        let _ = device;
        loop {
            match rx.try_recv() {
                Ok(v) => return Ok(v),
                Err(std::sync::mpsc::TryRecvError::Empty) => host_yield()?,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return Err(gone()),
            }
        }
    }
}
