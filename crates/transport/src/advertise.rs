//! Advertised endpoints: the `host:port` an executor registers must be one a
//! dispatcher can dial, so wildcard addresses and port 0 are refused.

use std::net::IpAddr;

/// Why an advertised endpoint cannot be dialled by a dispatcher.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unroutable {
    /// The host is a wildcard (`0.0.0.0`, `::`): it means "every interface"
    /// to a listener, and nothing to a peer.
    #[error(
        "{0} is a wildcard address, which means every interface to a listener and no host to a dispatcher"
    )]
    Wildcard(IpAddr),
    /// The port is 0: a listener picks a free port; a peer cannot dial it.
    #[error("port 0 asks the OS for any free port and cannot be dialled")]
    PortZero,
}

/// What to do about an [`Unroutable`] endpoint, for error messages.
pub const ADVERTISE_HINT: &str = "set --advertise HOST:PORT (env TOOLMESH_ADVERTISE; ServeOptions::advertise in the SDK) to an address dispatchers can reach, such as the pod IP from the downward API";

/// Checks that `endpoint` (`host:port`, IPv6 in brackets) is not a wildcard
/// address or port 0. Malformed endpoints pass: checking their syntax is the
/// caller's business.
pub fn check_advertised(endpoint: &str) -> Result<(), Unroutable> {
    let Some((host, port)) = endpoint.trim().rsplit_once(':') else {
        return Ok(());
    };
    if port.parse::<u16>() == Ok(0) {
        return Err(Unroutable::PortZero);
    }
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    match host.parse::<IpAddr>() {
        Ok(ip) if ip.is_unspecified() => Err(Unroutable::Wildcard(ip)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wildcards in either family and port 0 are refused; names, loopback
    /// and ordinary addresses pass.
    #[test]
    fn wildcards_and_port_zero_are_unroutable() {
        for endpoint in ["0.0.0.0:9001", "[::]:9001", "[0:0::0]:1"] {
            assert!(
                matches!(check_advertised(endpoint), Err(Unroutable::Wildcard(_))),
                "{endpoint}"
            );
        }
        for endpoint in ["10.0.0.7:0", "kb.internal:0", "0.0.0.0:0"] {
            assert_eq!(
                check_advertised(endpoint),
                Err(Unroutable::PortZero),
                "{endpoint}"
            );
        }
        for endpoint in ["10.0.0.7:9001", "[::1]:9001", "kb.internal:443", "nonsense"] {
            assert_eq!(check_advertised(endpoint), Ok(()), "{endpoint}");
        }
    }
}
