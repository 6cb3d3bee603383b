//! The bus's serial port (a U2D2 or any USB–RS-485 adapter), opened raw 8N1 at the bus's baud rate
//! and driven by tokio through `AsyncFd`.
//!
//! Why our own ~100 lines instead of `tokio-serial`: that crate pulls `nix`, which turns on libc
//! features that rebuild nearly every dependency, and a Dynamixel bus needs none of what it adds
//! (flow control, port enumeration, Windows). The rate goes through `termios2`/`BOTHER`, so every
//! rate a servo can be set to works, including 4.5 Mbps, which has no `Bnnn` constant.
//! The emulator's pseudo-terminal accepts the same calls, so the tests open it through this path.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// An open serial port in raw mode. Reads and writes never block the runtime.
pub struct SerialPort {
    fd: AsyncFd<std::fs::File>,
}

impl SerialPort {
    /// Opens `path` non-blocking, without becoming its controlling terminal, raw 8N1, no flow
    /// control, at `baud`. Must be called inside a tokio runtime (the fd is registered with it).
    pub fn open(path: &Path, baud: u32) -> io::Result<Self> {
        let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in port path"))?;
        // SAFETY: plain libc calls on a descriptor this function owns; every result is checked.
        let fd = unsafe {
            let raw = libc::open(
                cpath.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC,
            );
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            OwnedFd::from_raw_fd(raw)
        };
        configure(&fd, baud)?;
        // SAFETY: the File owns the descriptor and keeps it open, unchanged, for as long as the
        // AsyncFd holds it (register's contract).
        let fd =
            unsafe { AsyncFd::register(std::fs::File::from(fd)) }.map_err(|e| e.into_parts().1)?;
        Ok(SerialPort { fd })
    }

    /// The rate the port is set to, read back from the driver (for tests and diagnostics).
    pub fn baud(&self) -> io::Result<u32> {
        let t = get2(self.fd.get_ref().as_raw_fd())?;
        Ok(t.c_ospeed)
    }
}

fn get2(fd: i32) -> io::Result<libc::termios2> {
    // SAFETY: TCGETS2 fills a termios2 the kernel defines; the result is checked.
    unsafe {
        let mut t: libc::termios2 = std::mem::zeroed();
        if libc::ioctl(fd, libc::TCGETS2 as _, &mut t) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(t)
    }
}

/// Raw 8N1 (what `cfmakeraw` sets), receiver on, modem lines ignored, no flow control, the rate as
/// `BOTHER`, and VMIN 1 / VTIME 0: with O_NONBLOCK an empty port then answers EAGAIN, which tokio
/// turns into waiting (VMIN 0 would answer 0 bytes, indistinguishable from a closed port).
fn configure(fd: &OwnedFd, baud: u32) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    let mut t = get2(fd)?;
    t.c_iflag &= !(libc::IGNBRK
        | libc::BRKINT
        | libc::PARMRK
        | libc::ISTRIP
        | libc::INLCR
        | libc::IGNCR
        | libc::ICRNL
        | libc::IXON
        | libc::IXOFF
        | libc::IXANY);
    t.c_oflag &= !libc::OPOST;
    t.c_lflag &= !(libc::ECHO | libc::ECHONL | libc::ICANON | libc::ISIG | libc::IEXTEN);
    t.c_cflag &= !(libc::CSIZE | libc::PARENB | libc::CSTOPB | libc::CRTSCTS | libc::CBAUD);
    t.c_cflag |= libc::CS8 | libc::CREAD | libc::CLOCAL | libc::BOTHER;
    t.c_cflag &= !((libc::CBAUD as libc::tcflag_t) << libc::IBSHIFT);
    t.c_cflag |= (libc::BOTHER as libc::tcflag_t) << libc::IBSHIFT;
    t.c_ispeed = baud;
    t.c_ospeed = baud;
    t.c_cc[libc::VMIN] = 1;
    t.c_cc[libc::VTIME] = 0;
    // SAFETY: TCSETS2 with the struct just read and edited; the result is checked.
    if unsafe { libc::ioctl(fd, libc::TCSETS2 as _, &t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Adapters round to the nearest rate their clock divides; a rate far from the asked one would
    // garble every packet, so it is refused here rather than seen as timeouts later.
    let got = get2(fd)?.c_ospeed;
    if got.abs_diff(baud) > baud / 50 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("asked for {baud} baud, the adapter set {got}"),
        ));
    }
    Ok(())
}

impl AsyncRead for SerialPort {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|f| f.get_ref().read(unfilled)) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for SerialPort {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            match guard.try_io(|f| f.get_ref().write(data)) {
                Ok(r) => return Poll::Ready(r),
                Err(_would_block) => continue,
            }
        }
    }

    /// The kernel queues what was written; there is no user-space buffer to flush.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
