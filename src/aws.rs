//! One way to build AWS SDK clients, shared by the SNS receiver and the CloudWatch source: the default
//! credential chain (environment, profile, IRSA web identity, ECS/IMDS), an explicit region, an optional
//! endpoint override (moto server in tests, VPC endpoints in production), and an HTTPS client on rustls with
//! ring, the crypto reqwest already links, so the SDK does not bring a second TLS stack.

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};

/// Where and how to reach an AWS API.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AwsTarget {
    /// Region; when empty, the default chain's (AWS_REGION, profile, IMDS).
    pub region: String,
    /// Endpoint override, e.g. `http://127.0.0.1:5055`; empty for AWS's own.
    pub endpoint: String,
}

/// Loads an SDK config for `target` from the default credential chain.
pub async fn sdk_config(target: &AwsTarget) -> SdkConfig {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let mut loader = aws_config::defaults(BehaviorVersion::latest()).http_client(http);
    if !target.region.is_empty() {
        loader = loader.region(Region::new(target.region.clone()));
    }
    if !target.endpoint.is_empty() {
        loader = loader.endpoint_url(target.endpoint.clone());
    }
    loader.load().await
}
