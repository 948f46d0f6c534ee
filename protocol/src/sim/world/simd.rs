//! The vector kernels of stages 2 to 4 (gravity, move, still count), and the choice among
//! them at run time.
//!
//! Each kernel gives exactly the results of the reference, the body-by-body pass in
//! `world.rs` (`protocol/tests/kernel.rs` holds every kernel this CPU has equal to it on
//! random and hostile worlds), and leaves a chunk of bodies it cannot compute exactly (an
//! untame body, see the kernels' notes) to the reference, whole:
//!
//! - `avx512.rs`: sixteen bodies in 32-bit lanes of 512-bit vectors, on CPUs with
//!   AVX-512F;
//! - `avx2.rs`: sixteen bodies in 16-bit lanes of 256-bit vectors, on CPUs with AVX2;
//! - elsewhere the reference itself.

#[cfg(target_arch = "x86_64")]
use super::bodies::ChunkLanes;
use super::{step_bodies as reference, Bodies, Dims};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

/// A way to run stages 2 to 4. Every kernel gives the same worlds; [`Kernel::best`] is
/// the one [`World::step`](super::World::step) uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// 512-bit vectors (x86-64 with AVX-512F).
    Avx512,
    /// 256-bit vectors (x86-64 with AVX2).
    Avx2,
    /// Body by body: the reference, on every CPU.
    Scalar,
}

impl Kernel {
    /// Every kernel, the fastest first.
    pub const ALL: [Kernel; 3] = [Kernel::Avx512, Kernel::Avx2, Kernel::Scalar];

    /// Whether this CPU can run the kernel (checked at run time, once: the standard
    /// library caches the answer).
    pub fn available(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => std::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => std::is_x86_feature_detected!("avx2"),
            Kernel::Scalar => true,
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The fastest kernel this CPU can run.
    pub fn best() -> Kernel {
        Kernel::ALL
            .into_iter()
            .find(|k| k.available())
            .unwrap_or(Kernel::Scalar)
    }

    /// The kernel's name, as the benches and tests print it.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Avx512 => "avx512",
            Kernel::Avx2 => "avx2",
            Kernel::Scalar => "scalar",
        }
    }
}

/// Runs stages 2 to 4 on every live body with `kernel`, or with the reference where this
/// CPU cannot run it (see [`Kernel::available`]). The vector kernels keep their own copy of
/// the bodies in `bodies` from one step to the next, each in its own layout (`Lanes` in
/// `bodies.rs`); the reference writes the slots through `DerefMut`, which makes it stale.
pub(super) fn step_bodies(kernel: Kernel, bodies: &mut Bodies, g: i32, dims: Dims) {
    match dims {
        Dims::Two => run::<2>(kernel, bodies, g),
        Dims::Three => run::<3>(kernel, bodies, g),
    }
}

fn run<const AXES: usize>(kernel: Kernel, bodies: &mut Bodies, g: i32) {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 if kernel.available() => {
            // SAFETY: the CPU has AVX-512F, checked just above; nothing else is required.
            unsafe { avx512::run::<AXES>(bodies, g) }
        }
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 if kernel.available() => {
            // SAFETY: the CPU has AVX2, checked just above; nothing else is required.
            unsafe { avx2::run::<AXES>(bodies, g) }
        }
        _ => reference::<AXES>(bodies, g),
    }
}

/// A chunk's lanes as a kernel's chunk step takes them, with whether they are fresh;
/// `None` when the chunk has none.
#[cfg(target_arch = "x86_64")]
type Kept<'a> = Option<(&'a mut ChunkLanes, bool)>;

/// One chunk's lanes in a kernel's loop: the lanes of chunk `i` (`l`, none past the
/// world's most bodies), whether `fresh` says they are fresh, and the chunk's bit in
/// `fresh` (0 when it has no lanes).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn chunk_lanes(l: Option<&mut ChunkLanes>, fresh: u8, i: usize) -> (Kept<'_>, u8) {
    match l {
        Some(l) => {
            let bit = 1u8 << (i % 8);
            (Some((l, fresh & bit != 0)), bit)
        }
        None => (None, 0),
    }
}
