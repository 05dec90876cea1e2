//! Sockets shared by every component that listens: the one TCP listener ([`listener`]) and
//! UDP socket set-up ([`udp`]).

pub mod listener;
pub mod udp;
