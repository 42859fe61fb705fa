//! Targets measured the same way, taking turns in every round so that a noisy machine weighs on each alike: latency at concurrency 1, then throughput at each in-flight setting.

use crate::Plan;
use crate::cpu::Meter;
use crate::load::{self, Client, Throughput, Workload};
use crate::stats::Latency;

/// Each target (a client and the call it makes) measured the same way,
/// taking turns in every round: latency per target, and per `in_flight`
/// setting throughput per target.
pub(crate) async fn measure(
    plan: &Plan,
    targets: &[(&Client, &Workload)],
    meters: &[Meter],
    in_flight: &[usize],
) -> (Vec<Latency>, Vec<Vec<Throughput>>) {
    let rounds = plan.rounds.max(1);
    let per_round = plan.latency_calls.div_ceil(rounds);
    let window = plan.throughput_window / u32::try_from(rounds).unwrap_or(1);
    for &(client, work) in targets {
        load::warm_up(client, work, plan.latency_warmup).await;
    }
    let mut samples: Vec<load::Samples> = targets.iter().map(|_| Default::default()).collect();
    for _ in 0..rounds {
        for (&(client, work), into) in targets.iter().zip(&mut samples) {
            into.record(client, work, per_round).await;
        }
    }
    let latency = samples.into_iter().map(load::Samples::summary).collect();
    let mut throughput = Vec::new();
    for &in_flight in in_flight {
        let mut windows: Vec<Vec<_>> = targets.iter().map(|_| Vec::new()).collect();
        for _ in 0..rounds {
            for (i, (&(client, work), into)) in targets.iter().zip(&mut windows).enumerate() {
                let meter = meters.get(i).cloned().unwrap_or_default();
                into.push(
                    load::throughput(
                        client,
                        work,
                        in_flight,
                        plan.throughput_warmup,
                        window,
                        &meter,
                    )
                    .await,
                );
            }
        }
        throughput.push(
            windows
                .iter()
                .map(|w| Throughput::from_rounds(in_flight, w))
                .collect(),
        );
    }
    (latency, throughput)
}

/// Calls kept in flight for the MCP and bridge rows' throughput.
pub(crate) const MCP_IN_FLIGHT: usize = 32;
