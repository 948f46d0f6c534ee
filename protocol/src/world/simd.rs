//! Stages 2 to 4 of a step (gravity, move, still count) eight bodies at a time, in AVX2's
//! 256-bit vectors of eight 32-bit lanes, chosen at run time on x86-64 CPUs that have it.
//!
//! The results are exactly those of the body-by-body pass in `world.rs` (the reference;
//! `protocol/tests/kernel.rs` holds the two equal on random and hostile worlds). The
//! kernel works in 32-bit lanes where the reference computes in 64 bits, so it takes only
//! chunks where every live body is *tame*, which makes each 32-bit operation exact:
//!
//! - gravity `|g| <= 10 000` (checked once a step);
//! - on every used axis, position in `0..=10 000` and velocity (after gravity) in
//!   `-10 000..=10 000`.
//!
//! Then `p + v` is in `-10 000..=20 000`, so one reflection lands in the box and the
//! reference's clamp never acts; `3 |v|` and `7 |v|` stay far below 2^31. A chunk holding
//! an untame live body (a teleport out of the box, an impulse faster than the box is wide,
//! a huge gravity: only hostile or unusual inputs) is left to the reference, whole. Dead
//! slots are never written: their lanes are computed and their rows not stored.
//!
//! Each body is one 256-bit row in memory (`Body`'s layout is its snapshot words); eight
//! rows are transposed into eight vectors, one per field, worked on, and transposed back.

use super::{Body, Dims};

/// Runs stages 2 to 4 on every live body with the vector kernel. Returns false, having
/// changed nothing, when the CPU has no AVX2 (the caller then runs the reference).
pub(super) fn step_bodies(bodies: &mut [Body], g: i32, dims: Dims) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above; nothing else is required.
        unsafe { avx2::step_bodies(bodies, g, dims) };
        return true;
    }
    let _ = (bodies, g, dims);
    false
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! Every function here is `unsafe` only because it uses AVX2 instructions: the callers
    //! have checked that the CPU has them. Memory is touched only in `chunk`'s loads and
    //! stores, each with its SAFETY note.

    use super::super::{step_bodies as reference, Body, Dims, BOX_MM};
    use std::arch::x86_64::*;

    /// See [`super::step_bodies`].
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn step_bodies(bodies: &mut [Body], g: i32, dims: Dims) {
        match dims {
            Dims::Two => run::<2>(bodies, g),
            Dims::Three => run::<3>(bodies, g),
        }
    }

    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    unsafe fn run<const AXES: usize>(bodies: &mut [Body], g: i32) {
        if g.unsigned_abs() > BOX_MM as u32 {
            reference::<AXES>(bodies, g);
            return;
        }
        let gv = _mm256_set1_epi32(g);
        let mut chunks = bodies.chunks_exact_mut(8);
        for c in &mut chunks {
            let done = match <&mut [Body; 8]>::try_from(&mut *c) {
                Ok(c8) => chunk::<AXES>(c8, gv),
                Err(_) => false, // never: the chunks are of 8
            };
            if !done {
                reference::<AXES>(c, g);
            }
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            // The last 1..=7 bodies, padded with empty (dead) slots, which stay as they are.
            let mut pad = [Body::default(); 8];
            pad[..rest.len()].copy_from_slice(rest);
            if chunk::<AXES>(&mut pad, gv) {
                rest.copy_from_slice(&pad[..rest.len()]);
            } else {
                reference::<AXES>(rest, g);
            }
        }
    }

    /// One step's stages 2 to 4 for eight bodies. Returns false, having written nothing,
    /// when a live body among them is not tame (see the module's notes).
    #[inline(always)]
    unsafe fn chunk<const AXES: usize>(c: &mut [Body; 8], g: __m256i) -> bool {
        let rows = c.as_mut_ptr().cast::<__m256i>();
        // SAFETY: `rows` points at eight `Body`s: 32 bytes each, aligned to 32 (`Body` is
        // `repr(C, align(32))`), every byte initialised (`Body: IntoBytes`, no padding).
        let r = [0, 1, 2, 3, 4, 5, 6, 7].map(|i| unsafe { _mm256_load_si256(rows.add(i)) });
        let [a, s, px, py, pz, vx, vy, vz] = transpose(r);
        let l = _mm256_set1_epi32(BOX_MM);
        let zero = _mm256_setzero_si256();
        let live = _mm256_cmpeq_epi32(a, _mm256_set1_epi32(1));
        let vy = _mm256_sub_epi32(vy, g);
        let (avx, avy, avz) = (
            _mm256_abs_epi32(vx),
            _mm256_abs_epi32(vy),
            _mm256_abs_epi32(vz),
        );
        // Tame: every used position and |velocity| at most L as an unsigned number (a
        // negative position, and |i32::MIN|, are above it).
        let mut big = _mm256_max_epu32(_mm256_max_epu32(px, py), _mm256_max_epu32(avx, avy));
        if AXES == 3 {
            big = _mm256_max_epu32(big, _mm256_max_epu32(pz, avz));
        }
        let untame = _mm256_andnot_si256(at_most(big, l), live);
        if _mm256_movemask_ps(_mm256_castsi256_ps(untame)) != 0 {
            return false;
        }
        let (npx, nvx) = axis(px, vx, avx, live, l);
        let (npy, nvy) = axis(py, vy, avy, live, l);
        let (npz, nvz) = if AXES == 3 {
            axis(pz, vz, avz, live, l)
        } else {
            (pz, vz)
        };
        // Floor friction on the axes other than y, where the body ends on the floor.
        let floor = _mm256_and_si256(_mm256_cmpeq_epi32(npy, zero), live);
        let (nvx, nvz) = if _mm256_movemask_ps(_mm256_castsi256_ps(floor)) == 0 {
            (nvx, nvz)
        } else if AXES == 3 {
            (friction(nvx, floor), friction(nvz, floor))
        } else {
            (friction(nvx, floor), nvz)
        };
        // Still count: +1 (saturating) at rest on every used axis, else 0.
        let moving = if AXES == 3 {
            _mm256_or_si256(_mm256_or_si256(nvx, nvy), nvz)
        } else {
            _mm256_or_si256(nvx, nvy)
        };
        let rest = _mm256_cmpeq_epi32(moving, zero);
        let ones = _mm256_set1_epi32(-1);
        let inc = _mm256_add_epi32(_mm256_sub_epi32(s, ones), _mm256_cmpeq_epi32(s, ones));
        let ns = _mm256_and_si256(inc, rest);
        let out = transpose([a, ns, npx, npy, npz, nvx, nvy, nvz]);
        // Only live bodies' rows are written back: a dead slot keeps every field as it was.
        let live_rows = _mm256_movemask_ps(_mm256_castsi256_ps(live));
        if live_rows == 0xFF {
            // Every body live (the common case): every row, without a test each.
            for (i, row) in out.into_iter().enumerate() {
                // SAFETY: as below.
                unsafe { _mm256_store_si256(rows.add(i), row) };
            }
            return true;
        }
        for (i, row) in out.into_iter().enumerate() {
            if live_rows & (1 << i) != 0 {
                // SAFETY: as for the loads. The bytes written make a valid `Body`: the first
                // word is the body's own first word as loaded (`a` passes through both
                // transposes untouched), so `alive` is 1 and the three bytes after it are
                // zero; the other seven words are any u32 or i32, as `still`, `pos`, `vel`.
                unsafe { _mm256_store_si256(rows.add(i), row) };
            }
        }
        true
    }

    /// One axis of the move stage for tame lanes (`av` = |v|): `p + v`, reflected off the
    /// wall it crossed (at most one: `p + v` is in `-L..=2L`), the velocity reversed and
    /// damped to `trunc(-3v / 4)`, and settled on the wall when that is below 8 in size.
    #[inline(always)]
    unsafe fn axis(
        p: __m256i,
        v: __m256i,
        av: __m256i,
        live: __m256i,
        l: __m256i,
    ) -> (__m256i, __m256i) {
        let np = _mm256_add_epi32(p, v);
        let inside = at_most(np, l);
        if _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_or_si256(
            inside,
            _mm256_xor_si256(live, _mm256_set1_epi32(-1)),
        ))) == 0xFF
        {
            // No live body crossed a wall on this axis.
            return (np, v);
        }
        // L - |L - |np||: np itself inside the box, -np below it, 2L - np above it.
        let rp = _mm256_sub_epi32(
            l,
            _mm256_abs_epi32(_mm256_sub_epi32(l, _mm256_abs_epi32(np))),
        );
        // |trunc(-3v / 4)| = floor(3 |v| / 4), with the sign of -v.
        let m = _mm256_srli_epi32::<2>(_mm256_add_epi32(av, _mm256_add_epi32(av, av)));
        let bounced = _mm256_sign_epi32(_mm256_sub_epi32(_mm256_setzero_si256(), m), v);
        // Settles when floor(3 |v| / 4) < 8, that is |v| <= 10, at the wall crossed.
        let settle = _mm256_andnot_si256(inside, _mm256_cmpgt_epi32(_mm256_set1_epi32(11), av));
        let wall = _mm256_and_si256(_mm256_cmpgt_epi32(np, l), l);
        let nv = _mm256_blendv_epi8(_mm256_andnot_si256(settle, bounced), v, inside);
        let np = _mm256_blendv_epi8(rp, wall, settle);
        (np, nv)
    }

    /// `trunc(v * 7 / 8)` where `floor` is set, else `v` (|v| <= L: no overflow).
    #[inline(always)]
    unsafe fn friction(v: __m256i, floor: __m256i) -> __m256i {
        let av = _mm256_abs_epi32(v);
        let m = _mm256_srli_epi32::<3>(_mm256_sub_epi32(_mm256_slli_epi32::<3>(av), av));
        _mm256_blendv_epi8(v, _mm256_sign_epi32(m, v), floor)
    }

    /// Lanes where `x <= bound` as unsigned numbers.
    #[inline(always)]
    unsafe fn at_most(x: __m256i, bound: __m256i) -> __m256i {
        _mm256_cmpeq_epi32(_mm256_min_epu32(x, bound), x)
    }

    /// An 8 x 8 transpose of 32-bit lanes: rows (bodies) to columns (fields) and back.
    #[inline(always)]
    unsafe fn transpose(r: [__m256i; 8]) -> [__m256i; 8] {
        let t0 = _mm256_unpacklo_epi32(r[0], r[1]);
        let t1 = _mm256_unpackhi_epi32(r[0], r[1]);
        let t2 = _mm256_unpacklo_epi32(r[2], r[3]);
        let t3 = _mm256_unpackhi_epi32(r[2], r[3]);
        let t4 = _mm256_unpacklo_epi32(r[4], r[5]);
        let t5 = _mm256_unpackhi_epi32(r[4], r[5]);
        let t6 = _mm256_unpacklo_epi32(r[6], r[7]);
        let t7 = _mm256_unpackhi_epi32(r[6], r[7]);
        let u0 = _mm256_unpacklo_epi64(t0, t2);
        let u1 = _mm256_unpackhi_epi64(t0, t2);
        let u2 = _mm256_unpacklo_epi64(t1, t3);
        let u3 = _mm256_unpackhi_epi64(t1, t3);
        let u4 = _mm256_unpacklo_epi64(t4, t6);
        let u5 = _mm256_unpackhi_epi64(t4, t6);
        let u6 = _mm256_unpacklo_epi64(t5, t7);
        let u7 = _mm256_unpackhi_epi64(t5, t7);
        [
            _mm256_permute2x128_si256::<0x20>(u0, u4),
            _mm256_permute2x128_si256::<0x20>(u1, u5),
            _mm256_permute2x128_si256::<0x20>(u2, u6),
            _mm256_permute2x128_si256::<0x20>(u3, u7),
            _mm256_permute2x128_si256::<0x31>(u0, u4),
            _mm256_permute2x128_si256::<0x31>(u1, u5),
            _mm256_permute2x128_si256::<0x31>(u2, u6),
            _mm256_permute2x128_si256::<0x31>(u3, u7),
        ]
    }
}
