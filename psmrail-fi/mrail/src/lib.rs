//! The libfabric external provider library of psmrail's **ofi_mrail**
//! provider (`libpsmrail_mrail_fi.so`): one symbol, `fi_prov_ini`, which
//! libfabric calls when it loads the file from `FI_PROVIDER_PATH`.
//! Everything else is in the `psmrail-fi` crate.

/// libfabric's entry point for an external provider (`FI_EXT_INI`).
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut psmrail_fi::sys::fi_provider {
    psmrail_fi::provider(psmrail_fi::Which::Mrail)
}
