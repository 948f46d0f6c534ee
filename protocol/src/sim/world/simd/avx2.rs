//! Stages 2 to 4 of a step (gravity, move, still count) sixteen bodies at a time, in AVX2's
//! 256-bit vectors of sixteen 16-bit lanes, for x86-64 CPUs that have AVX2 and not
//! AVX-512F (chosen at run time).
//!
//! The results are exactly those of the body-by-body pass in `world.rs` (the reference;
//! `protocol/tests/kernel.rs` holds the two equal on random and hostile worlds). The
//! kernel works in 16-bit lanes where the reference computes in 64 bits, so it takes only
//! chunks where every live body is *tame*, which makes each 16-bit operation exact:
//!
//! - gravity `|g| <= 10 000` (checked once a step);
//! - on every used axis, position in `0..=10 000` and velocity (after gravity) in
//!   `-10 000..=10 000`.
//!
//! Then `p + v` is in `-10 000..=20 000`, so one reflection lands in the box and the
//! reference's clamp never acts, and every value the move computes (`2L - (p + v)` up to
//! 30 000, `3 |v|` up to 30 000) fits in an i16. Friction, `trunc(7v / 8)`, is computed as
//! `v - sign(v) ceil(|v| / 8)`, the same value without forming `7v`. The fields are
//! narrowed to 16 bits with saturation, so a value outside the i16 range lands outside the
//! tame range, on the same side, and the check sees it. A chunk holding an untame live
//! body (a teleport out of the box, an impulse faster than the box is wide, a huge gravity:
//! only hostile or unusual inputs) is left to the reference, whole. Dead slots are never
//! written: their lanes are computed and their bodies not stored.
//!
//! Each body is two 128-bit halves in memory (`Body`'s layout is its snapshot words).
//! Eight bodies are loaded a half per 128-bit lane, body i beside body i + 4, and
//! transposed within the lanes into eight vectors of 32-bit lanes, one per field; two such
//! groups are narrowed into one vector of 16-bit lanes per moving field, worked on, widened
//! and transposed back. The still count and `alive` stay in 32-bit lanes.
//!
//! The transposes keep the vector pipes that shuffle busy (two of the four on the CPU
//! measured, AMD Zen 3), so the rest of the kernel avoids shuffles and shifts where another
//! operation gives the same value: a blend of two loads instead of an insert from memory,
//! constants loaded instead of broadcast, a multiply-high instead of a shift, the constant
//! first word of a live body instead of the loaded one (one vector less to keep). Together
//! these made the step 10 to 15 % faster there (docs/performance.md, "Fewer shuffles").
//!
//! A chunk's fields as the kernel computes with them ([`Fields`]: the moving fields in
//! 16-bit lanes, `alive` and the still counts in 32-bit lanes, a 2D world's z) are also
//! kept from one step to the next in the world's `Lanes` (`bodies.rs`): a chunk whose lanes
//! are fresh (nothing but this kernel has written its slots since) is read from there,
//! without the loads, transposes and narrowing. The values kept are exact: after a step
//! every live body of a tame chunk has its position in the box and |velocity| at most L.
//! The last 1..=7 bodies, stepped through a padded copy, keep no lanes.
//!
//! Every function here is `unsafe` because it uses AVX2 instructions (the callers have
//! checked that the CPU has them); `load_fields`, `pair`, `store_fields` and `put` also
//! read or write memory through a pointer, under the contract in their `# Safety`
//! notes, which `chunk` meets.

use super::super::{step_bodies as reference, Bodies, Body, BOX_MM};
use super::{chunk_lanes, Kept, Kernel};
use std::arch::x86_64::*;

/// A vector constant in memory. The kernel loads its constants with [`konst`]: the
/// compiler would otherwise broadcast each from two bytes at every use, which takes a
/// shuffle pipe (see the module's notes); a load takes none.
#[repr(C, align(32))]
struct Konst([u16; 16]);

/// The box's side, L, in every 16-bit lane.
static L: Konst = Konst([BOX_MM as u16; 16]);
/// 11 in every 16-bit lane: a bounce settles below |v| 11.
static ELEVEN: Konst = Konst([11; 16]);
/// 7 in every 16-bit lane: `ceil(x / 8)` is `(x + 7) / 8`.
static SEVEN: Konst = Konst([7; 16]);
/// 3/4 as a 16-bit fraction: `mulhi(x, 0xC000)` is `floor(3x / 4)`.
static THREE_QUARTERS: Konst = Konst([0xC000; 16]);
/// 1/8 as a 16-bit fraction: `mulhi(x, 0x2000)` is `floor(x / 8)`.
static EIGHTH: Konst = Konst([0x2000; 16]);
/// 1 in every 32-bit lane.
static ONE: Konst = Konst([1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0]);
/// u32::MAX - 1 in every 32-bit lane: the largest still count that can grow.
static BELOW_MAX: Konst = Konst([
    0xFFFE, 0xFFFF, 0xFFFE, 0xFFFF, 0xFFFE, 0xFFFF, 0xFFFE, 0xFFFF, 0xFFFE, 0xFFFF, 0xFFFE, 0xFFFF,
    0xFFFE, 0xFFFF, 0xFFFE, 0xFFFF,
]);

/// Loads a constant (see [`Konst`]).
#[inline(always)]
fn konst(k: &'static Konst) -> __m256i {
    // SAFETY: `k` is 32 readable bytes aligned to 32; the volatile read keeps it a load.
    unsafe { std::ptr::read_volatile((k as *const Konst).cast::<__m256i>()) }
}

/// Runs stages 2 to 4 on every live body (see [`super::step_bodies`]).
///
/// # Safety
/// The CPU must have AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn run<const AXES: usize>(bodies: &mut Bodies, g: i32) {
    let (bodies, lanes, fresh) = bodies.with_lanes(Kernel::Avx2);
    if g.unsigned_abs() > BOX_MM as u32 {
        *fresh = 0;
        reference::<AXES>(bodies, g);
        return;
    }
    // |g| <= L < 2^15: exact as an i16.
    let gv = _mm256_set1_epi16(g as i16);
    // Chunk i (bodies 16 i .. 16 i + 16, or its first eight) keeps its lanes in the i-th
    // of `lanes`, while there are any (a world holds at most 64 bodies).
    // (No closures here: a call to one costs the vector registers.)
    let mut lanes = lanes.0.iter_mut();
    let mut fresh_now = *fresh;
    let mut pairs = bodies.chunks_exact_mut(16);
    let mut i = 0;
    for c in &mut pairs {
        let (kept, bit) = chunk_lanes(lanes.next(), fresh_now, i);
        i += 1;
        let (x, y) = c.split_at_mut(8);
        let done = match (<&mut [Body; 8]>::try_from(x), <&mut [Body; 8]>::try_from(y)) {
            (Ok(x), Ok(y)) => chunk::<AXES>(x, Some(y), kept, gv),
            _ => false, // never: the halves are of 8
        };
        if done {
            fresh_now |= bit;
        } else {
            fresh_now &= !bit;
            reference::<AXES>(c, g);
        }
    }
    let mut rest = pairs.into_remainder();
    if rest.len() >= 8 {
        let (kept, bit) = chunk_lanes(lanes.next(), fresh_now, i);
        let (x, after) = rest.split_at_mut(8);
        let done = match <&mut [Body; 8]>::try_from(&mut *x) {
            Ok(x8) => chunk::<AXES>(x8, None, kept, gv),
            Err(_) => false, // never: the slice is of 8
        };
        if done {
            fresh_now |= bit;
        } else {
            fresh_now &= !bit;
            reference::<AXES>(x, g);
        }
        rest = after;
    }
    if !rest.is_empty() {
        // The last 1..=7 bodies, padded with empty (dead) slots, which stay as they are;
        // they keep no lanes (the chunk's bit, if any, is that of the eight before them).
        let mut pad = [Body::default(); 8];
        pad[..rest.len()].copy_from_slice(rest);
        if chunk::<AXES>(&mut pad, None, None, gv) {
            rest.copy_from_slice(&pad[..rest.len()]);
        } else {
            reference::<AXES>(rest, g);
        }
    }
    *fresh = fresh_now;
}

/// The fields of a chunk's sixteen bodies as the kernel computes with them (16-bit lanes
/// in the order `chunk` gives, or 32-bit lanes of x's eight bodies and of y's), and as
/// the world's `Lanes` keep them between steps: 15 of the chunk's 16 vectors there.
#[derive(Clone, Copy)]
struct Fields {
    /// All ones in the 32-bit lanes of the live bodies: x's, y's.
    live_xy: [__m256i; 2],
    /// The same in 16-bit lanes.
    live: __m256i,
    /// Position and velocity on each axis (z unused in 2D), saturated to 16 bits; the
    /// velocity before gravity.
    pos: [__m256i; 3],
    vel: [__m256i; 3],
    /// Still counts: x's, y's.
    still: [__m256i; 2],
    /// Position z and velocity z in 32-bit lanes, x's then y's: a 2D world keeps them as
    /// they are.
    z: [[__m256i; 2]; 2],
}

impl Fields {
    /// Read from the bodies' rows (`hx`, and `hy` or else `hx` again: see `chunk`).
    ///
    /// # Safety
    /// The CPU must have AVX2; `hx` and `hy` must each point at eight `Body`s.
    #[inline(always)]
    unsafe fn from_rows<const AXES: usize>(
        hx: *const __m128i,
        hy: Option<*const __m128i>,
    ) -> Fields {
        // SAFETY: eight `Body`s are 256 bytes aligned to 32 (`Body` is `repr(C,
        // align(32))`), every byte initialised (`Body: IntoBytes`, no padding);
        // `load_fields` reads exactly those bytes.
        let fx = unsafe { load_fields(hx) };
        let fy = match hy {
            // SAFETY: as above.
            Some(h) => unsafe { load_fields(h) },
            None => fx,
        };
        let one = konst(&ONE);
        let live_xy = [
            _mm256_cmpeq_epi32(fx[0], one),
            _mm256_cmpeq_epi32(fy[0], one),
        ];
        // The motion fields of the 16 bodies in 16-bit lanes, saturated: a value outside
        // the i16 range becomes one outside the tame range, on the same side. Lanes 0..=3
        // are x's bodies 0..=3, lanes 4..=7 y's 0..=3, lanes 8..=11 x's 4..=7, lanes
        // 12..=15 y's 4..=7 (`widen` undoes this order).
        // (No closure here: it would not inherit the caller's target features.)
        let (pz, vz) = if AXES == 3 {
            (
                _mm256_packs_epi32(fx[4], fy[4]),
                _mm256_packs_epi32(fx[7], fy[7]),
            )
        } else {
            (_mm256_setzero_si256(), _mm256_setzero_si256()) // unused
        };
        Fields {
            live_xy,
            live: _mm256_packs_epi32(live_xy[0], live_xy[1]),
            pos: [
                _mm256_packs_epi32(fx[2], fy[2]),
                _mm256_packs_epi32(fx[3], fy[3]),
                pz,
            ],
            vel: [
                _mm256_packs_epi32(fx[5], fy[5]),
                _mm256_packs_epi32(fx[6], fy[6]),
                vz,
            ],
            still: [fx[1], fy[1]],
            z: [[fx[4], fx[7]], [fy[4], fy[7]]],
        }
    }

    /// The 15 vectors in their order in the lanes.
    #[inline(always)]
    fn vectors(&self) -> [__m256i; 15] {
        let [x, y] = self.z;
        [
            self.live_xy[0],
            self.live_xy[1],
            self.live,
            self.pos[0],
            self.pos[1],
            self.pos[2],
            self.vel[0],
            self.vel[1],
            self.vel[2],
            self.still[0],
            self.still[1],
            x[0],
            x[1],
            y[0],
            y[1],
        ]
    }

    /// Read from a chunk's lanes.
    ///
    /// # Safety
    /// The CPU must have AVX2; `at` must point at 15 vectors aligned to 32.
    #[inline(always)]
    unsafe fn load(at: *const __m256i) -> Fields {
        let mut v = [_mm256_setzero_si256(); 15];
        for (k, v) in v.iter_mut().enumerate() {
            // SAFETY: the caller's contract.
            *v = unsafe { _mm256_load_si256(at.add(k)) };
        }
        Fields {
            live_xy: [v[0], v[1]],
            live: v[2],
            pos: [v[3], v[4], v[5]],
            vel: [v[6], v[7], v[8]],
            still: [v[9], v[10]],
            z: [[v[11], v[12]], [v[13], v[14]]],
        }
    }

    /// Writes into a chunk's lanes the vectors a step changes, and where the lanes were
    /// stale (`all`) the others too; only those the kernel reads in `AXES` dimensions
    /// (the 16-bit z in 3D, the 32-bit z in 2D), so that no other vector is kept alive
    /// through the step for this (AVX2 has sixteen vector registers).
    ///
    /// # Safety
    /// The CPU must have AVX2; `at` must point at 15 writable vectors aligned to 32.
    #[inline(always)]
    unsafe fn store<const AXES: usize>(&self, at: *mut __m256i, all: bool) {
        for (k, v) in self.vectors().into_iter().enumerate() {
            let read = match k {
                5 | 8 => AXES == 3,
                11..=14 => AXES == 2,
                _ => true,
            };
            let changes = matches!(k, 3..=10);
            if read && (changes || all) {
                // SAFETY: the caller's contract.
                unsafe { _mm256_store_si256(at.add(k), v) };
            }
        }
    }
}

/// One step's stages 2 to 4 for the eight bodies of `x` and the eight of `y` (with
/// `y` `None`, `x`'s lanes are computed twice and written once), read from the chunk's
/// lanes where it has them and they are fresh, else from the bodies, and written to both.
/// Returns false, having written nothing, when a live body among them is not tame (see
/// the module's notes). `g` holds gravity in every 16-bit lane.
#[inline(always)]
unsafe fn chunk<const AXES: usize>(
    x: &mut [Body; 8],
    y: Option<&mut [Body; 8]>,
    kept: Kept<'_>,
    g: __m256i,
) -> bool {
    // Each group of eight bodies as 16 halves of 16 bytes: body i's first half (alive,
    // still, pos x, y) is half 2i, its second half (pos z, vel x, y, z) half 2i + 1.
    let hx = x.as_mut_ptr().cast::<__m128i>();
    let hy = y.map(|y| y.as_mut_ptr().cast::<__m128i>());
    let kept = kept.map(|(l, fresh)| (l.as_mut_ptr().cast::<__m256i>(), fresh));
    let f = match kept {
        // SAFETY: a chunk's lanes are 512 bytes aligned to 64 (`Lanes`).
        Some((at, true)) => unsafe { Fields::load(at) },
        // SAFETY: `hx` (and `hy`) point at eight `Body`s each.
        _ => unsafe { Fields::from_rows::<AXES>(hx, hy.map(|h| h.cast_const())) },
    };
    let [live_x, live_y] = f.live_xy;
    let live = f.live;
    let [px, py, pz] = f.pos;
    let [vx, vy, vz] = f.vel;
    // Saturating, like the reference's `saturating_sub` (whose result is outside the
    // tame range exactly when this one is: |g| <= L).
    let vy = _mm256_subs_epi16(vy, g);
    let l = konst(&L);
    let zero = _mm256_setzero_si256();
    let (avx, avy, avz) = (
        _mm256_abs_epi16(vx),
        _mm256_abs_epi16(vy),
        _mm256_abs_epi16(vz),
    );
    // Tame: every used position and |velocity| at most L as an unsigned number (a
    // negative position, and |i16::MIN|, are above it).
    let mut big = _mm256_max_epu16(_mm256_max_epu16(px, py), _mm256_max_epu16(avx, avy));
    if AXES == 3 {
        big = _mm256_max_epu16(big, _mm256_max_epu16(pz, avz));
    }
    // Every live lane tame (`testc`: no bit of `live` outside `at_most`).
    if _mm256_testc_si256(at_most(big, l), live) == 0 {
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
    let floor = _mm256_and_si256(_mm256_cmpeq_epi16(npy, zero), live);
    let (nvx, nvz) = if _mm256_testz_si256(floor, floor) != 0 {
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
    let rest = _mm256_cmpeq_epi16(moving, zero);
    let (rest_x, rest_y) = (
        _mm256_unpacklo_epi16(rest, rest),
        _mm256_unpackhi_epi16(rest, rest),
    );
    // Back to 32-bit lanes, x's bodies and y's, each pair of fields that a body's half
    // holds side by side interleaved (the first stage of the transpose back); z of a 2D
    // world as it was. A live body's new position is in the box: not negative.
    let (pxy_x, pxy_y) = interleave16::<false>(npx, npy);
    let (zvx_x, zvx_y, vyz_x, vyz_y) = if AXES == 3 {
        let (zvx_x, zvx_y) = interleave16::<true>(npz, nvx);
        let (vyz_x, vyz_y) = interleave16::<true>(nvy, nvz);
        (zvx_x, zvx_y, vyz_x, vyz_y)
    } else {
        let (nvx_x, nvx_y) = widen(nvx);
        let (nvy_x, nvy_y) = widen(nvy);
        (
            interleave(f.z[0][0], nvx_x),
            interleave(f.z[1][0], nvx_y),
            interleave(nvy_x, f.z[0][1]),
            interleave(nvy_y, f.z[1][1]),
        )
    };
    let still_xy = [still(f.still[0], rest_x), still(f.still[1], rest_y)];
    if let Some((at, fresh)) = kept {
        let after = Fields {
            pos: [npx, npy, npz],
            vel: [nvx, nvy, nvz],
            still: still_xy,
            ..f
        };
        // SAFETY: as for the load of the lanes above.
        unsafe { after.store::<AXES>(at, !fresh) };
    }
    // A live body's first word is 1 (`alive`, then three zero bytes): written as the
    // constant, so that the loaded word need not be kept until here.
    let as_x = interleave(konst(&ONE), still_xy[0]);
    // Only live bodies are written back: a dead slot keeps every field as it was.
    let live_rows = _mm256_movemask_ps(_mm256_castsi256_ps(live_x)) as u32;
    // SAFETY: as for the loads; `store_fields` writes the halves of the bodies whose bit
    // is set in `live_rows`, and only those, all live: their first word was 1 as loaded
    // (`live_x`) and is written as 1 (`ONE`). The bytes written make a valid `Body`:
    // `alive` is 1 and the three bytes after it are zero; the other seven words are any
    // u32 or i32, as `still`, `pos`, `vel`.
    unsafe { store_fields(hx, [as_x, pxy_x, zvx_x, vyz_x], live_rows) };
    if let Some(h) = hy {
        let as_y = interleave(konst(&ONE), still_xy[1]);
        let live_rows = _mm256_movemask_ps(_mm256_castsi256_ps(live_y)) as u32;
        // SAFETY: as for `hx` just above.
        unsafe { store_fields(h, [as_y, pxy_y, zvx_y, vyz_y], live_rows) };
    }
    true
}

/// One axis of the move stage for tame lanes (`av` = |v|): `p + v`, reflected off the
/// wall it crossed (at most one: `p + v` is in `-L..=2L`), the velocity reversed and
/// damped to `trunc(-3v / 4)`, and settled on the wall when that is below 8 in size.
/// Every intermediate value is in `-L..=3L`, within an i16.
#[inline(always)]
unsafe fn axis(
    p: __m256i,
    v: __m256i,
    av: __m256i,
    live: __m256i,
    l: __m256i,
) -> (__m256i, __m256i) {
    let np = _mm256_add_epi16(p, v);
    let inside = at_most(np, l);
    // No live lane crossed a wall on this axis (`testc`: no bit of `live` outside).
    if _mm256_testc_si256(inside, live) != 0 {
        return (np, v);
    }
    // min(|np|, 2L - np): np itself inside the box, -np below it, 2L - np above it.
    let rp = _mm256_min_epi16(
        _mm256_abs_epi16(np),
        _mm256_sub_epi16(_mm256_add_epi16(l, l), np),
    );
    // |trunc(-3v / 4)| = floor(3 |v| / 4), with the sign of -v (a multiply-high: the
    // shift of `3 |v|` would take a shuffle pipe).
    let m = _mm256_mulhi_epu16(av, konst(&THREE_QUARTERS));
    let bounced = _mm256_sign_epi16(_mm256_sub_epi16(_mm256_setzero_si256(), m), v);
    // Settles when floor(3 |v| / 4) < 8, that is |v| <= 10, at the wall crossed.
    let settle = _mm256_andnot_si256(inside, _mm256_cmpgt_epi16(konst(&ELEVEN), av));
    let wall = _mm256_and_si256(_mm256_cmpgt_epi16(np, l), l);
    let nv = _mm256_blendv_epi8(_mm256_andnot_si256(settle, bounced), v, inside);
    let np = _mm256_blendv_epi8(rp, wall, settle);
    (np, nv)
}

/// `trunc(v * 7 / 8)` where `floor` is set, else `v`: `v` less `ceil(|v| / 8)` with
/// the sign of `v` (|v| <= L: no overflow).
#[inline(always)]
unsafe fn friction(v: __m256i, floor: __m256i) -> __m256i {
    let c = _mm256_mulhi_epu16(
        _mm256_add_epi16(_mm256_abs_epi16(v), konst(&SEVEN)),
        konst(&EIGHTH),
    );
    _mm256_sub_epi16(v, _mm256_and_si256(_mm256_sign_epi16(c, v), floor))
}

/// The still count after a step: `s + 1`, saturating, where `rest` is set, else 0.
#[inline(always)]
unsafe fn still(s: __m256i, rest: __m256i) -> __m256i {
    let below_max = _mm256_min_epu32(s, konst(&BELOW_MAX));
    _mm256_and_si256(_mm256_sub_epi32(below_max, _mm256_set1_epi32(-1)), rest)
}

/// The 16 lanes of `v` (see `chunk`) as two vectors of eight sign-extended 32-bit
/// lanes: x's bodies, then y's.
#[inline(always)]
unsafe fn widen(v: __m256i) -> (__m256i, __m256i) {
    let sign = _mm256_srai_epi16::<15>(v);
    (
        _mm256_unpacklo_epi16(v, sign),
        _mm256_unpackhi_epi16(v, sign),
    )
}

/// Two fields `a` and `b` in 16-bit lanes (see `chunk`) as [`interleave`] gives them
/// of the two fields in 32-bit lanes: x's bodies, then y's, sign-extended (`SIGNED`) or
/// else zero-extended (for lanes that are not negative or are not stored).
#[inline(always)]
unsafe fn interleave16<const SIGNED: bool>(a: __m256i, b: __m256i) -> ([__m256i; 2], [__m256i; 2]) {
    let (x, y) = (_mm256_unpacklo_epi16(a, b), _mm256_unpackhi_epi16(a, b));
    let (sx, sy) = if SIGNED {
        (_mm256_srai_epi16::<15>(x), _mm256_srai_epi16::<15>(y))
    } else {
        (_mm256_setzero_si256(), _mm256_setzero_si256())
    };
    (
        [_mm256_unpacklo_epi16(x, sx), _mm256_unpackhi_epi16(x, sx)],
        [_mm256_unpacklo_epi16(y, sy), _mm256_unpackhi_epi16(y, sy)],
    )
}

/// 16-bit lanes where `x <= bound` as unsigned numbers.
#[inline(always)]
unsafe fn at_most(x: __m256i, bound: __m256i) -> __m256i {
    _mm256_cmpeq_epi16(_mm256_min_epu16(x, bound), x)
}

/// The fields of eight bodies (`halves`: their 16 halves, see `chunk`), one vector per
/// field in snapshot order, lane i holding body i's. Each half is loaded into one
/// 128-bit lane of a vector, body i's beside body i + 4's (two loads and a blend, see
/// `pair`), so that a 4 x 4 transpose within each 128-bit lane finishes the job.
///
/// # Safety
/// The CPU must have AVX2; `halves` must point at 256 readable bytes aligned to 16.
#[inline(always)]
unsafe fn load_fields(halves: *const __m128i) -> [__m256i; 8] {
    // SAFETY: halves 0..16 are the 256 bytes of the caller's contract.
    let [a, s, px, py] = unsafe {
        transpose4([
            pair(halves, 0),
            pair(halves, 2),
            pair(halves, 4),
            pair(halves, 6),
        ])
    };
    // SAFETY: as above.
    let [pz, vx, vy, vz] = unsafe {
        transpose4([
            pair(halves, 1),
            pair(halves, 3),
            pair(halves, 5),
            pair(halves, 7),
        ])
    };
    [a, s, px, py, pz, vx, vy, vz]
}

/// Half `h` (of body i) in the low 128-bit lane and half `h + 8` (of body i + 4) in
/// the high one: two 256-bit loads (halves `h`, `h + 1` and halves `h + 7`, `h + 8`)
/// and a blend, which any vector pipe takes (an insert from memory takes a shuffle
/// pipe, see the module's notes).
///
/// # Safety
/// The CPU must have AVX2; halves `h..=h + 8` must be readable.
#[inline(always)]
unsafe fn pair(halves: *const __m128i, h: usize) -> __m256i {
    // SAFETY: the caller's contract.
    unsafe {
        _mm256_blend_epi32::<0xF0>(
            _mm256_loadu_si256(halves.add(h).cast()),
            _mm256_loadu_si256(halves.add(h + 7).cast()),
        )
    }
}

/// The inverse of `load_fields`: writes the eight bodies whose bit (body i: bit i) is
/// set in `live` from their fields, as four pairs of fields [`interleave`]d (alive and
/// still, pos x and y, pos z and vel x, vel y and z), one vector per field in 32-bit
/// lanes, lane i holding body i's.
///
/// # Safety
/// The CPU must have AVX2; `halves` must point at 256 writable bytes aligned to 16.
#[inline(always)]
unsafe fn store_fields(halves: *mut __m128i, f: [[__m256i; 2]; 4], live: u32) {
    let lo = finish([f[0][0], f[0][1], f[1][0], f[1][1]]);
    let hi = finish([f[2][0], f[2][1], f[3][0], f[3][1]]);
    if live == 0xFF {
        // Every body live (the common case): every half, without a test each.
        for i in 0..4 {
            // SAFETY: halves 0..16 are the 256 bytes of the caller's contract.
            unsafe { put(halves, 2 * i, lo[i], hi[i], 0xFF) };
        }
        return;
    }
    for i in 0..4 {
        // SAFETY: as above.
        unsafe { put(halves, 2 * i, lo[i], hi[i], live >> i) };
    }
}

/// Stores body i's two halves (the low 128-bit lanes of `lo` and `hi`; `h` = 2i) when
/// bit 0 of `live` is set, and body i + 4's (the high lanes) when bit 4 is. The stores
/// are volatile only so that the compiler keeps them 128 bits wide (it would otherwise
/// merge a body's two halves into one 256-bit store behind a cross-lane shuffle); the
/// memory is ordinary.
///
/// # Safety
/// The CPU must have AVX2; halves `h`, `h + 1`, `h + 8` and `h + 9` must be writable
/// and aligned to 16.
#[inline(always)]
unsafe fn put(halves: *mut __m128i, h: usize, lo: __m256i, hi: __m256i, live: u32) {
    if live & 1 != 0 {
        // SAFETY: the caller's contract: each pointer is valid for writing 16 bytes and
        // aligned to 16, as `write_volatile` of an `__m128i` requires.
        unsafe {
            std::ptr::write_volatile(halves.add(h), _mm256_castsi256_si128(lo));
            std::ptr::write_volatile(halves.add(h + 1), _mm256_castsi256_si128(hi));
        }
    }
    if live & 0x10 != 0 {
        // SAFETY: the caller's contract.
        unsafe {
            std::ptr::write_volatile(halves.add(h + 8), _mm256_extracti128_si256::<1>(lo));
            std::ptr::write_volatile(halves.add(h + 9), _mm256_extracti128_si256::<1>(hi));
        }
    }
}

/// A 4 x 4 transpose of 32-bit lanes within each 128-bit lane: rows to columns and back.
#[inline(always)]
unsafe fn transpose4(r: [__m256i; 4]) -> [__m256i; 4] {
    let ([t0, t1], [t2, t3]) = (interleave(r[0], r[1]), interleave(r[2], r[3]));
    finish([t0, t1, t2, t3])
}

/// The first stage of [`transpose4`]: rows `a` and `b` interleaved, 32-bit lane by lane.
#[inline(always)]
unsafe fn interleave(a: __m256i, b: __m256i) -> [__m256i; 2] {
    [_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b)]
}

/// The second stage of [`transpose4`], from the two pairs of rows [`interleave`]d.
#[inline(always)]
unsafe fn finish(t: [__m256i; 4]) -> [__m256i; 4] {
    [
        _mm256_unpacklo_epi64(t[0], t[2]),
        _mm256_unpackhi_epi64(t[0], t[2]),
        _mm256_unpacklo_epi64(t[1], t[3]),
        _mm256_unpackhi_epi64(t[1], t[3]),
    ]
}
