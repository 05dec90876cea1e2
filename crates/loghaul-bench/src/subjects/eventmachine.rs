//! The EventMachine line counter of the 2011 `basic.rb` experiment
//! (`bench/peers/eventmachine/basic.rb`): BufferedTokenizer splits lines, a counter counts them;
//! a timer publishes the count (atomically, by rename) for the bench to poll.

/// The script, run as `ruby basic.rb PORT COUNT_FILE`.
pub const SCRIPT: &str = include_str!("../../../../bench/peers/eventmachine/basic.rb");
