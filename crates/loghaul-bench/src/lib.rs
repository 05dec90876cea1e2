//! loghaul's benchmark lab: the load generator (`bench gen`), the meter (`bench meter`) and the
//! experiments that compare loghaul with its peers (`bench run SCENARIO`).
//!
//! Layout: [`payload`] builds seeded message blocks, [`target`] sends them (one small impl per
//! transport; the forward protocol's is [`fluent`]; [`connect`] opens the stream connections, plain
//! or TLS), [`generator`] drives connections; [`meter`] turns what a subject wrote into exact
//! loss, duplicates, flow and latency, and [`watch`] samples a subject's output cheaply during a
//! run; [`subjects`] configures loghaul and its peers, [`scenario`] runs them ([`deliver`] climbs
//! the rate steps of `forward_deliver`'s tree of processes, [`tail`] runs a subject reading a
//! file written before it starts), [`procstat`] charges them CPU and
//! memory, [`report`] writes the table, raw runs and chart; [`discard`] is a listener
//! that measures the generator alone; [`bare`] is loghaul's codec without the pipeline, the
//! yardstick subject. The HTTP experiments have their own runners: [`http_echo`] (servers under
//! `ab` and `wrk`) and [`http_client`] (clients moving the same bytes), with their peers located
//! by [`http_peers`] and [`httpd`], the lab's own small server. [`kafka`] runs a real Kafka
//! broker, and [`kafka_pipeline`] loghaul on both sides of it beside Kafka's own perf tools.
//! [`cli`] is the clap surface the `loghaul` binary mounts under `bench`.

pub mod bare;
pub mod cli;
pub mod connect;
pub mod deliver;
pub mod discard;
pub mod fluent;
pub mod generator;
pub mod histogram;
pub mod http_client;
pub mod http_echo;
pub mod http_peers;
pub mod httpd;
pub mod kafka;
pub mod kafka_pipeline;
pub mod meter;
pub mod payload;
pub mod procstat;
pub mod progress;
pub mod report;
pub mod scenario;
pub mod subjects;
pub mod tail;
pub mod target;
pub mod watch;
