//! The fault and load harnesses: the simulator over many seeds with its independent oracle,
//! and real-process runs under kill -9 and pauses, partitions through our proxy, hostile
//! clients, and emulated link delays.

pub mod chaos;
pub mod delay_line;
pub mod emulate;
pub mod faults;
pub mod hostile;
#[allow(dead_code)] // until `runner chaos` checks its histories with it
pub mod linearize;
pub mod partition;
pub mod proxy;
pub mod rolling;
pub mod sim;
pub mod sim_oracle;
