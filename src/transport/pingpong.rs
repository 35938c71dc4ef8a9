//! What a transport offers `kvxfer latency`: a ping-pong, as `ib_write_lat` and `sockperf ping-pong` run one. The
//! initiator sends a message of the case's size and waits for the whole answer; the responder waits for the whole
//! message and answers with one of the same size. Half the initiator's round trip is the one-way latency.
//!
//! The ends meet as a run's target and source do: the responder opens and offers (in `Accept`), the initiator
//! connects with that offer and answers (in `Connect`), the responder finishes with the answer.

use super::api::Context;
use crate::plan::latency::LatencyPlan;
use crate::plan::TransportConfig;
use anyhow::Result;

/// A transport's ping-pong ([`super::Transport::ping_pong`]).
pub trait PingPong: Sync {
    /// Refuse a plan this transport cannot ping-pong with (a knob of another transport), as a usage error.
    fn check(&self, plan: &LatencyPlan) -> Result<()>;

    /// The responder's end, for messages up to `max_size` bytes; [`PingEnd::hello`] is its offer.
    fn open_responder(
        &self,
        cfg: &TransportConfig,
        plan: &LatencyPlan,
        max_size: u64,
        ctx: &Context,
    ) -> Result<Box<dyn PingEnd>>;

    /// The initiator's end, connected with the responder's `offer`; [`PingEnd::hello`] is its answer.
    fn connect_initiator(
        &self,
        cfg: &TransportConfig,
        plan: &LatencyPlan,
        max_size: u64,
        offer: serde_json::Value,
        ctx: &Context,
    ) -> Result<Box<dyn PingEnd>>;
}

/// One end of a ping-pong, connected.
pub trait PingEnd: Send {
    /// What the other end needs to connect: the responder's offer, the initiator's answer.
    fn hello(&self) -> serde_json::Value;

    /// Finish connecting with the other end's hello (the responder takes the initiator's answer).
    fn finish(&mut self, _peer: serde_json::Value) -> Result<()> {
        Ok(())
    }

    /// Initiator: send message `seq` of `size` bytes and return once the whole answer has arrived.
    fn ping(&mut self, size: usize, seq: u64) -> Result<()>;

    /// Responder: wait for the whole message `seq` of `size` bytes, then send the answer.
    fn pong(&mut self, size: usize, seq: u64) -> Result<()>;

    /// How this end ran (how it waits, inline sizes...), for the results' `transport_detail`.
    fn describe(&self) -> serde_json::Value;
}
