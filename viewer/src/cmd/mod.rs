//! One module per subcommand: each parses its arguments and calls down (the argument
//! types several commands share are [`crate::args`], what they print [`crate::report`]).

pub mod attach;
pub mod check;
pub mod compare;
pub mod fields;
pub mod first_difference;
pub mod follow;
pub mod ghost;
pub mod index;
pub mod inspect;
pub mod keyframe;
pub mod recover;
pub mod render;
pub mod replay;
pub mod seek;
pub mod sessions;
pub mod trace;
pub mod verify;
pub mod watch;
