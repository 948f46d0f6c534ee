//! Stages 2 to 4 of a step sixteen bodies at a time, in AVX-512's 512-bit vectors of
//! sixteen 32-bit lanes, for x86-64 CPUs that have AVX-512F (chosen at run time).
//!
//! The results are exactly those of the reference, the body-by-body pass in `world.rs`
//! (`protocol/tests/kernel.rs` holds the two equal). The kernel computes in 32-bit lanes
//! and takes only chunks where every live body is *tame* (as the AVX2 kernel, see
//! `avx2.rs`): gravity `|g| <= 10 000`, and on every used axis position in `0..=10 000`
//! and velocity after gravity in `-10 000..=10 000`. Then every value the move computes
//! (`p + v` in `-L..=2L`, `2L - (p + v)`, `3v`, `7v`) is far inside an i32. Gravity is
//! subtracted wrapping, where the reference saturates: the two differ only when the
//! reference's result is i32::MIN or i32::MAX, and then the wrapped result is within
//! `|g|` of one of them, untame as well, so such a chunk is left to the reference whole.
//!
//! Sixteen bodies are eight rows of two bodies (512 bytes). Three stages of two-source
//! permutes (`vpermt2d`, any 16 of the 32 lanes of two vectors) turn the eight rows into
//! eight vectors of one field each, lane i holding body i's, and three more turn them
//! back: each stage swaps one bit of the row number with one bit of the lane number
//! ([`Layout`]). That is 24 permutes each way, where the AVX2 kernel's transposes,
//! narrowing to 16 bits and widening back take about 80 shuffles of 256-bit vectors for the
//! same sixteen bodies. Only the rows of live bodies are written, with masked stores: a
//! dead slot keeps every byte.
//!
//! The eight field vectors of each chunk are also kept from one step to the next, in the
//! world's `Lanes` (`bodies.rs`): a chunk whose lanes are fresh (nothing but this kernel
//! has written its slots since it stored them) is read from there, with no loads of rows
//! and no permutes to fields, so that a step runs 24 permutes a chunk instead of 48. Every
//! other write to the slots (an op of stage 1, a hand edit, another kernel, the reference
//! taking an untame chunk) leaves the chunk stale, and it is read from its rows again. In
//! the lanes a dead body keeps the fields its slot holds, as its slot does.

use super::super::{step_bodies as reference, Bodies, Body, BOX_MM};
use super::{chunk_lanes, Kept, Kernel};
use std::arch::x86_64::*;

/// Where each of the 7 bits of a value's place (lane bits 0..=3, then row bits 0..=2, at
/// positions 0..=6) comes from in its (body, field) number: 0..=3 the body's bits 0..=3,
/// 4..=6 the field's bits 0..=2.
type Layout = [u8; 7];

/// As the bodies lie in memory: row = body / 2, lane = (body % 2) * 8 + field.
const ROWS: Layout = [4, 5, 6, 0, 1, 2, 3];
/// After the first stage: field bit 2 and body bit 3 swapped.
const STAGE1: Layout = [4, 5, 3, 0, 1, 2, 6];
/// After the second: field bit 1 and body bit 2 swapped.
const STAGE2: Layout = [4, 2, 3, 0, 1, 5, 6];
/// One vector per field: row = field, lane = body.
const FIELDS: Layout = [0, 1, 2, 3, 4, 5, 6];

/// The index vector of `_mm512_permutex2var_epi32` that takes rows `a` and `b` of layout
/// `from`, which differ in row position `at` (`a` has it 0), to the row of layout `to`
/// whose row position `at` is `v`. The two layouts differ in position `at` and in the
/// lane positions only.
const fn index(from: Layout, to: Layout, at: usize, v: u32) -> Index {
    let mut out = [0u32; 16];
    let mut lane = 0;
    while lane < 16 {
        // The value's (body, field) bits that the destination lane fixes.
        let mut bit = [0u32; 7];
        let mut q = 0;
        while q < 4 {
            bit[to[q] as usize] = (lane >> q) & 1;
            q += 1;
        }
        bit[to[at] as usize] = v;
        // Its place in `from`: which source, which lane there.
        let mut src = 0;
        let mut q = 0;
        while q < 4 {
            src |= bit[from[q] as usize] << q;
            q += 1;
        }
        out[lane as usize] = src | (bit[from[at] as usize] << 4);
        lane += 1;
    }
    Index(out)
}

/// A permute's index vector in memory, aligned for one load.
#[repr(C, align(64))]
struct Index([u32; 16]);

/// The three stages from rows to fields: the row position each swaps, and the index
/// vectors of its two output rows.
static TO_FIELDS: [(usize, Index, Index); 3] = [
    (6, index(ROWS, STAGE1, 6, 0), index(ROWS, STAGE1, 6, 1)),
    (5, index(STAGE1, STAGE2, 5, 0), index(STAGE1, STAGE2, 5, 1)),
    (4, index(STAGE2, FIELDS, 4, 0), index(STAGE2, FIELDS, 4, 1)),
];
/// The same back, from fields to rows.
static TO_ROWS: [(usize, Index, Index); 3] = [
    (4, index(FIELDS, STAGE2, 4, 0), index(FIELDS, STAGE2, 4, 1)),
    (5, index(STAGE2, STAGE1, 5, 0), index(STAGE2, STAGE1, 5, 1)),
    (6, index(STAGE1, ROWS, 6, 0), index(STAGE1, ROWS, 6, 1)),
];

/// Runs stages 2 to 4 on every live body (see [`super::step_bodies`]).
///
/// # Safety
/// The CPU must have AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn run<const AXES: usize>(bodies: &mut Bodies, g: i32) {
    let (bodies, lanes, fresh) = bodies.with_lanes(Kernel::Avx512);
    if g.unsigned_abs() > BOX_MM as u32 {
        *fresh = 0;
        reference::<AXES>(bodies, g);
        return;
    }
    let mut now = *fresh;
    for (i, c) in bodies.chunks_mut(16).enumerate() {
        // A world holds at most 64 bodies; slots past them (built by hand) have no lanes.
        // (No closures here: they would not inherit this function's target features, and
        // a call to one costs the vector registers.)
        let (kept, bit) = chunk_lanes(lanes.0.get_mut(i), now, i);
        // SAFETY: the CPU has AVX-512F (this function's contract); `c` holds 1..=16 bodies.
        if unsafe { chunk::<AXES>(c, kept, g) } {
            now |= bit;
        } else {
            now &= !bit;
            reference::<AXES>(c, g);
        }
    }
    *fresh = now;
}

/// One step's stages 2 to 4 for the bodies of `c`, at most sixteen, with the chunk's lanes
/// where it has them (and whether they are fresh), which it leaves fresh. Returns false,
/// having written nothing, when a live body among them is not tame (see the module's
/// notes).
///
/// # Safety
/// The CPU must have AVX-512F; `c` must hold at most 16 bodies.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn chunk<const AXES: usize>(c: &mut [Body], kept: Kept<'_>, g: i32) -> bool {
    let n = c.len().min(16);
    let rows_at = c.as_mut_ptr().cast::<__m512i>();
    let f = match &kept {
        // SAFETY: each lane vector is 64 bytes aligned to 64 (`Lanes`).
        Some((l, true)) => l.map(|v| unsafe { _mm512_load_si512(v.as_ptr().cast()) }),
        // SAFETY: `rows_at` points to the `n` bodies of `c`; the CPU has AVX-512F.
        _ => unsafe { from_rows(rows_at, n) },
    };
    let one = _mm512_set1_epi32(1);
    let l = _mm512_set1_epi32(BOX_MM);
    // Live bodies among the `n` of `c` (the lanes past them are dead as read from rows, and
    // the mask keeps any write of the kernel inside `c` whatever the lanes hold).
    let present = (u32::MAX >> (32 - n)) as __mmask16;
    let live = _mm512_mask_cmpeq_epi32_mask(present, f[0], one);
    let (px, py, pz, vx, vz) = (f[2], f[3], f[4], f[5], f[7]);
    let vy = _mm512_sub_epi32(f[6], _mm512_set1_epi32(g));
    let (avx, avy, avz) = (
        _mm512_abs_epi32(vx),
        _mm512_abs_epi32(vy),
        _mm512_abs_epi32(vz),
    );
    // Tame: every used position and |velocity| at most L as an unsigned number (a
    // negative position, and |i32::MIN|, are above it).
    let mut big = _mm512_max_epu32(_mm512_max_epu32(px, py), _mm512_max_epu32(avx, avy));
    if AXES == 3 {
        big = _mm512_max_epu32(big, _mm512_max_epu32(pz, avz));
    }
    if _mm512_mask_cmple_epu32_mask(live, big, l) != live {
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
    let floor = _mm512_mask_testn_epi32_mask(live, npy, npy);
    let (nvx, nvz) = if floor == 0 {
        (nvx, nvz)
    } else if AXES == 3 {
        (friction(nvx, floor), friction(nvz, floor))
    } else {
        (friction(nvx, floor), nvz)
    };
    // Still count: +1 (saturating) at rest on every used axis, else 0.
    let moving = if AXES == 3 {
        _mm512_or_si512(_mm512_or_si512(nvx, nvy), nvz)
    } else {
        _mm512_or_si512(nvx, nvy)
    };
    let rest = _mm512_testn_epi32_mask(moving, moving);
    let below_max = _mm512_min_epu32(f[1], _mm512_set1_epi32(-2));
    let still = _mm512_maskz_add_epi32(rest, below_max, one);
    let fields = [f[0], still, npx, npy, npz, nvx, nvy, nvz];
    if let Some((l, was_fresh)) = kept {
        // Dead lanes keep their fields as loaded: where the lanes were stale, all of them
        // are stored first. The kernel changes `still`, `pos` and `vel` of live bodies
        // (not z in 2D).
        for (k, (out, v)) in l.iter_mut().zip(fields).enumerate() {
            let at: *mut i32 = out.as_mut_ptr().cast();
            let changed = k >= 1 && (AXES == 3 || (k != 4 && k != 7));
            // SAFETY: each lane vector is 64 bytes aligned to 64 (`Lanes`).
            unsafe {
                if !was_fresh {
                    _mm512_store_si512(at.cast(), f[k]);
                }
                if changed {
                    _mm512_mask_store_epi32(at, live, v);
                }
            }
        }
    }
    let rows = permute(fields, &TO_ROWS);
    if live == 0xFFFF {
        // Sixteen bodies, every one live (the common case): whole rows.
        for (k, r) in rows.into_iter().enumerate() {
            // SAFETY: as for the loads; the bytes written make valid `Body`s: each live
            // body's first word was 1 as loaded (`live`) and is written as loaded; the
            // other seven words are any u32 or i32, as `still`, `pos`, `vel`.
            unsafe { _mm512_storeu_si512(rows_at.add(k).cast(), r) };
        }
    } else {
        for (k, r) in rows.into_iter().enumerate().take(n.div_ceil(2)) {
            // Row k's bodies 2k and 2k + 1: their eight words each where they are live
            // (a slot past the last body is never live).
            let words = PAIR_WORDS[usize::from(live >> (2 * k)) & 3];
            // SAFETY: as just above; a masked store writes only the live bodies' words,
            // all in `c`.
            unsafe { _mm512_mask_storeu_epi32(rows_at.add(k).cast(), words, r) };
        }
    }
    true
}

/// The eight field vectors of the `n` bodies (1..=16) at `rows_at`, read from their rows.
///
/// # Safety
/// The CPU must have AVX-512F; `rows_at` must point to `n` initialised bodies.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn from_rows(rows_at: *mut __m512i, n: usize) -> [__m512i; 8] {
    // Row k is bodies 2k and 2k + 1; the slots past the last body are read as empty (dead)
    // bodies, which are never written.
    let mut rows = [_mm512_setzero_si512(); 8];
    for (k, r) in rows.iter_mut().enumerate().take(n.div_ceil(2)) {
        // SAFETY: body 2k is among the `n` (k < n / 2 rounded up), so the row's address
        // is theirs; their bytes are initialised (`Body: IntoBytes`, no padding). Row k's
        // 64 bytes are theirs when body 2k + 1 is, else its first 32 only, and the masked
        // load reads only those.
        *r = unsafe {
            if 2 * k + 1 < n {
                _mm512_loadu_si512(rows_at.add(k).cast())
            } else {
                _mm512_maskz_loadu_epi32(0x00FF, rows_at.add(k).cast())
            }
        };
    }
    // SAFETY: the CPU has AVX-512F.
    unsafe { permute(rows, &TO_FIELDS) }
}

/// The words of a row (two bodies) to write, by which of its bodies are live: bit 0 the
/// first body (words 0..8), bit 1 the second (words 8..16).
const PAIR_WORDS: [__mmask16; 4] = [0, 0x00FF, 0xFF00, 0xFFFF];

/// Three stages of permutes (see the module's notes), each swapping the row position it
/// names with a lane position.
#[inline(always)]
unsafe fn permute(mut rows: [__m512i; 8], stages: &[(usize, Index, Index); 3]) -> [__m512i; 8] {
    for (at, lo, hi) in stages {
        let bit = 1 << (at - 4);
        // SAFETY: each `Index` is 64 bytes aligned to 64.
        let (lo, hi) = unsafe {
            (
                _mm512_load_si512(lo.0.as_ptr().cast()),
                _mm512_load_si512(hi.0.as_ptr().cast()),
            )
        };
        let mut out = rows;
        for r in 0..8 {
            if r & bit == 0 {
                let (a, b) = (rows[r], rows[r | bit]);
                out[r] = _mm512_permutex2var_epi32(a, lo, b);
                out[r | bit] = _mm512_permutex2var_epi32(a, hi, b);
            }
        }
        rows = out;
    }
    rows
}

/// One axis of the move stage for tame lanes (`av` = |v|): `p + v`, reflected off the
/// wall it crossed (at most one: `p + v` is in `-L..=2L`), the velocity reversed and
/// damped to `trunc(-3v / 4)`, and settled on the wall when that is below 8 in size.
#[inline(always)]
unsafe fn axis(
    p: __m512i,
    v: __m512i,
    av: __m512i,
    live: __mmask16,
    l: __m512i,
) -> (__m512i, __m512i) {
    let np = _mm512_add_epi32(p, v);
    // Live lanes that crossed a wall: `p + v` outside 0..=L as an unsigned number.
    let out = _mm512_mask_cmpgt_epu32_mask(live, np, l);
    if out == 0 {
        return (np, v);
    }
    // min(|np|, 2L - np): -np below the box, 2L - np above it.
    let rp = _mm512_min_epi32(
        _mm512_abs_epi32(np),
        _mm512_sub_epi32(_mm512_add_epi32(l, l), np),
    );
    // trunc(-3v / 4) = -trunc(3v / 4); trunc(t / 4) is (t + 3) >> 2 for a negative t and
    // t >> 2 otherwise (arithmetic shifts).
    let t = _mm512_add_epi32(_mm512_add_epi32(v, v), v);
    let round = _mm512_srli_epi32::<30>(_mm512_srai_epi32::<31>(t));
    let bounced = _mm512_sub_epi32(
        _mm512_setzero_si512(),
        _mm512_srai_epi32::<2>(_mm512_add_epi32(t, round)),
    );
    // Settles when floor(3 |v| / 4) < 8, that is |v| <= 10, at the wall crossed: L where
    // `np` is above it (`L - np` negative), else 0.
    let settle = _mm512_mask_cmplt_epu32_mask(out, av, _mm512_set1_epi32(11));
    let wall = _mm512_and_si512(_mm512_srai_epi32::<31>(_mm512_sub_epi32(l, np)), l);
    let nv = _mm512_mask_mov_epi32(v, out, bounced);
    let nv = _mm512_mask_mov_epi32(nv, settle, _mm512_setzero_si512());
    let np = _mm512_mask_mov_epi32(np, out, rp);
    let np = _mm512_mask_mov_epi32(np, settle, wall);
    (np, nv)
}

/// `trunc(v * 7 / 8)` where `floor` is set, else `v`; for |v| <= L, `7v` is exact, and
/// `trunc(t / 8)` is `(t + 7) >> 3` for a negative t and `t >> 3` otherwise.
#[inline(always)]
unsafe fn friction(v: __m512i, floor: __mmask16) -> __m512i {
    let t = _mm512_sub_epi32(_mm512_slli_epi32::<3>(v), v);
    let round = _mm512_srli_epi32::<29>(_mm512_srai_epi32::<31>(t));
    _mm512_mask_mov_epi32(v, floor, _mm512_srai_epi32::<3>(_mm512_add_epi32(t, round)))
}
