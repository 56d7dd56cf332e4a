//! Whether the operating system lets this process use the tile registers.
//!
//! A CPU's AMX bits are not enough: the tile data (8 KiB per thread) is state the
//! kernel must save and restore, and Linux (5.16 and later) hands it to a process only on
//! request, `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`; until then the first
//! tile instruction is a SIGILL. The request is made once per process (the caller
//! caches the answer) and only where the CPU has the tiles. Before it, the XSAVE
//! feature mask (XCR0) must show that the kernel enables the tile state at all. A
//! container's seccomp profile may refuse `arch_prctl`; then, as on other systems (which
//! this crate does not ask), the answer is a sentence for the user and the vector paths
//! run.

/// Ask for the tile state; `Err` says why it is not available.
pub fn request() -> Result<(), String> {
    request_here()
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn request_here() -> Result<(), String> {
    use std::arch::asm;
    use std::arch::x86_64::__cpuid;
    /// `arch_prctl`'s system call number on x86-64 Linux.
    const SYS_ARCH_PRCTL: usize = 158;
    /// Request permission for a dynamically enabled XSAVE feature.
    const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
    /// The XSAVE feature number of the tile data.
    const XFEATURE_XTILEDATA: usize = 18;
    /// XCR0 bits of the tile configuration (17) and the tile data (18).
    const XCR0_TILE: u64 = 0b11 << 17;

    // SAFETY: CPUID leaf 1 exists on every x86-64 CPU and only reads registers. (Safe
    // on recent toolchains, `unsafe` on older ones within rust-version.)
    #[allow(unused_unsafe)]
    let osxsave = unsafe { __cpuid(1) }.ecx >> 27 & 1 == 1;
    if !osxsave {
        return Err("the operating system has not enabled XSAVE, so no tile state".into());
    }
    let (low, high): (u32, u32);
    // SAFETY: XGETBV with ECX = 0 reads XCR0; it exists when OSXSAVE is set (checked).
    unsafe {
        asm!(
            "xgetbv",
            in("ecx") 0u32,
            out("eax") low,
            out("edx") high,
            options(nomem, nostack, preserves_flags),
        );
    }
    let xcr0 = (high as u64) << 32 | low as u64;
    if xcr0 & XCR0_TILE != XCR0_TILE {
        return Err(format!(
            "the kernel does not enable the tile state (XCR0 {xcr0:#x} lacks bits 17-18; \
             Linux 5.16 or later enables it)"
        ));
    }
    let result: isize;
    // SAFETY: the arch_prctl system call with an integer request and argument; it reads
    // and writes no memory of ours. `syscall` overwrites RCX and R11.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL as isize => result,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if result == 0 {
        Ok(())
    } else {
        Err(format!(
            "Linux refused the tile state: arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) \
             failed with errno {} (a container's seccomp profile may block it)",
            -result
        ))
    }
}

#[cfg(all(target_arch = "x86_64", not(target_os = "linux")))]
fn request_here() -> Result<(), String> {
    Err("the tile state is requested on Linux only; this system was not asked".into())
}

#[cfg(not(target_arch = "x86_64"))]
fn request_here() -> Result<(), String> {
    Err("AMX tiles exist on x86-64 only".into())
}
