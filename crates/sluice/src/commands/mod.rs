//! One module per subcommand; each turns its flags into a plan and runs it.

pub mod load;
