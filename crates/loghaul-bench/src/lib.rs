//! loghaul's benchmark lab: the load generator (`bench gen`), the meter (`bench meter`) and the
//! experiments that compare loghaul with its peers (`bench run SCENARIO`).
//!
//! Layout: [`payload`] builds seeded message blocks, [`target`] sends them (one small impl per
//! transport; the forward protocol's is [`fluent`]; [`connect`] opens the stream connections, plain
//! or TLS), [`generator`] drives connections; [`meter`] turns what a subject wrote into exact
//! loss, duplicates, flow and latency, and [`watch`] samples a subject's output cheaply during a
//! run; [`subjects`] configures loghaul and its peers (the peers' configs are templates under
//! `bench/peers/`, filled in by [`template`]; TLS subjects get a throwaway PKI from [`pki`]);
//! [`scenarios`] are the experiments, each a module implementing one trait and listed in one
//! registry; [`runner`] runs the rounds most of them share, [`procstat`] charges the subjects CPU
//! and memory, [`report`] writes the table, raw runs and chart; [`discard`] is a listener
//! that measures the generator alone; [`bare`] is loghaul's codec without the pipeline, the
//! yardstick subject. The HTTP experiments' peers are located by [`http_peers`], and [`httpd`]
//! is the lab's own small server; [`kafka`] runs a real Kafka broker.
//! [`cli`] is the clap surface the `loghaul` binary mounts under `bench`.

pub mod bare;
pub mod cli;
pub mod connect;
pub mod discard;
pub mod fluent;
pub mod generator;
pub mod histogram;
pub mod http_peers;
pub mod httpd;
pub mod kafka;
pub mod meter;
pub mod otlp;
pub mod payload;
pub mod pki;
pub mod procstat;
pub mod progress;
pub mod report;
pub mod runner;
pub mod scenarios;
pub mod subjects;
pub mod target;
pub mod template;
pub mod watch;
