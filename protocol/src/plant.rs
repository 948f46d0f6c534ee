//! Faults planted in a machine on purpose, for the seeded simulation's `--plant`
//! (docs/reliability.md, "Planted faults"): only a build with the `plants` feature (the
//! simulation's) can set one; in every other build the slot holds nothing and every check
//! is a constant `false`, compiled away.

/// A machine's planted fault, one of the machine's own kinds `P`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Planted<P> {
    #[cfg(feature = "plants")]
    plant: Option<P>,
    #[cfg(not(feature = "plants"))]
    none: std::marker::PhantomData<P>,
}

impl<P> Default for Planted<P> {
    fn default() -> Self {
        Planted {
            #[cfg(feature = "plants")]
            plant: None,
            #[cfg(not(feature = "plants"))]
            none: std::marker::PhantomData,
        }
    }
}

impl<P: Copy + PartialEq> Planted<P> {
    /// Plants `p` (the simulation's `--plant`).
    #[cfg(feature = "plants")]
    pub(crate) fn set(&mut self, p: P) {
        self.plant = Some(p);
    }

    /// Whether `p` is planted (never, outside the simulation's build).
    #[inline(always)]
    pub(crate) fn is(&self, p: P) -> bool {
        #[cfg(feature = "plants")]
        return self.plant == Some(p);
        #[cfg(not(feature = "plants"))]
        {
            let _ = p;
            false
        }
    }
}
