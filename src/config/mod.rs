//! Typed configuration and the parsers for the `FI_PSM_*` and `FI_OFI_MRAIL_*`
//! environment variables.
