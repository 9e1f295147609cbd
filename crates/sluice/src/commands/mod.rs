//! One module per subcommand; each turns its flags into a plan and runs it.

pub mod bench;
pub mod bench_charts;
pub mod ddl;
pub mod demo;
pub mod gen;
pub mod jobs;
pub mod load;
pub mod pg;
pub mod probe;
