//! Which engine discovery picks: the hints' [`EngineChoice`], else
//! `PSMRAIL_ENGINE`, else `auto`; `auto` takes the native engine when the
//! PSM library loads and a device passes the preflight
//! ([`NativeEngine::load`]), and the soft engine otherwise, except when
//! the native engine's own variables are malformed (`Inval`): that is an
//! error whichever engine would have been picked.
//!
//! The decision is a pure function of the choice and the outcome of a probe
//! ([`decide`]), so both outcomes are testable on any machine.

use crate::config::{ConfigError, VarSource};
use crate::engine::native::NativeEngine;
use crate::engine::EngineKind;
use crate::fabric::caps::EngineChoice;
use crate::{Error, ErrorKind, Result};

/// The variable that chooses the engine when the hints do not:
/// `auto`, `native` or `soft` (case-insensitive).
pub const ENGINE_VAR: &str = "PSMRAIL_ENGINE";

/// Where the choice came from, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChoiceSource {
    Hints,
    Env,
    Default,
}

/// Reads [`ENGINE_VAR`] from `vars`: `None` when unset.
///
/// # Errors
/// `Inval` naming the variable for any other value (including non-UTF-8).
pub(crate) fn choice_from_vars<V: VarSource + ?Sized>(vars: &V) -> Result<Option<EngineChoice>> {
    let Some(text) = crate::config::read_var(vars, ENGINE_VAR)? else {
        return Ok(None);
    };
    text.parse::<EngineChoice>().map(Some).map_err(|_| {
        ConfigError::new(
            ENGINE_VAR,
            &text,
            0..text.len(),
            "auto, native or soft (case-insensitive)",
        )
        .with_problem(format!("{text:?} is not an engine"))
        .into()
    })
}

/// Resolves the choice: the hints', else the variable's, else auto.
pub(crate) fn resolve<V: VarSource + ?Sized>(
    hinted: Option<EngineChoice>,
    vars: &V,
) -> Result<(EngineChoice, ChoiceSource)> {
    if let Some(c) = hinted {
        return Ok((c, ChoiceSource::Hints));
    }
    Ok(match choice_from_vars(vars)? {
        Some(c) => (c, ChoiceSource::Env),
        None => (EngineChoice::Auto, ChoiceSource::Default),
    })
}

/// Decides the engine for `choice`; `probe` says whether the native engine
/// is usable (called only for `Auto` and `Native`).
///
/// # Errors
/// `NoData` when `Native` was chosen and the probe failed, carrying the
/// probe's message; the probe's `Inval` (a malformed variable) for `Auto`
/// too.
pub(crate) fn decide(
    choice: EngineChoice,
    source: ChoiceSource,
    probe: impl FnOnce() -> Result<()>,
) -> Result<EngineKind> {
    match choice {
        EngineChoice::Soft => Ok(EngineKind::Soft),
        EngineChoice::Auto => Ok(match probe() {
            Ok(()) => EngineKind::Native,
            Err(e) if e.kind() == ErrorKind::Inval => return Err(e),
            Err(e) => {
                tracing::debug!("engine auto: native unavailable, using soft: {e}");
                EngineKind::Soft
            }
        }),
        EngineChoice::Native => probe().map(|()| EngineKind::Native).map_err(|e| {
            let by = match source {
                ChoiceSource::Hints => "the hints".to_owned(),
                ChoiceSource::Env => format!("{ENGINE_VAR}=native"),
                ChoiceSource::Default => "default".to_owned(),
            };
            Error::with_source(
                ErrorKind::NoData,
                format!("the native engine was asked for (by {by}) but is not usable: {e}"),
                e,
            )
        }),
    }
}

/// The real probe: load PSM and check for a device.
pub(crate) fn native_probe() -> Result<()> {
    NativeEngine::load().map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_psm() -> Result<()> {
        Err(Error::new(
            ErrorKind::NoData,
            "native engine: cannot load PSM: nope",
        ))
    }

    #[test]
    fn decide_every_branch() {
        let src = ChoiceSource::Hints;
        assert_eq!(
            decide(EngineChoice::Soft, src, || panic!("no probe")).unwrap(),
            EngineKind::Soft
        );
        assert_eq!(
            decide(EngineChoice::Auto, src, || Ok(())).unwrap(),
            EngineKind::Native
        );
        assert_eq!(
            decide(EngineChoice::Auto, src, no_psm).unwrap(),
            EngineKind::Soft
        );
        let malformed = || Err(Error::new(ErrorKind::Inval, "PSMRAIL_PSM_LIB=\"\": empty"));
        let e = decide(EngineChoice::Auto, src, malformed).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval);
        assert_eq!(
            decide(EngineChoice::Native, src, || Ok(())).unwrap(),
            EngineKind::Native
        );
        let e = decide(EngineChoice::Native, ChoiceSource::Env, no_psm).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoData);
        let text = e.to_string();
        assert!(
            text.contains("PSMRAIL_ENGINE=native") && text.contains("cannot load PSM: nope"),
            "{text}"
        );
    }

    #[test]
    fn variable() {
        assert_eq!(choice_from_vars(&[("X", "1")]).unwrap(), None);
        assert_eq!(
            choice_from_vars(&[(ENGINE_VAR, "NATIVE")]).unwrap(),
            Some(EngineChoice::Native)
        );
        for bad in ["", "psm", "soft ", "auto,soft"] {
            let e = choice_from_vars(&[(ENGINE_VAR, bad)]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Inval);
            assert!(e.to_string().contains("PSMRAIL_ENGINE="), "{e}");
        }
        use std::os::unix::ffi::OsStringExt;
        let raw = [(
            ENGINE_VAR,
            std::ffi::OsString::from_vec(b"soft\xff".to_vec()),
        )];
        let e = choice_from_vars(&raw).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inval);
        assert!(
            e.to_string().contains(
                "PSMRAIL_ENGINE=\"soft\u{fffd}\": item \"\u{fffd}\" at byte 4: \
                 the value is not valid UTF-8"
            ),
            "{e}"
        );
    }

    #[test]
    fn hints_win_over_variable() {
        let vars = [(ENGINE_VAR, "bogus")];
        // The variable is not even read when the hints choose.
        assert_eq!(
            resolve(Some(EngineChoice::Soft), &vars).unwrap(),
            (EngineChoice::Soft, ChoiceSource::Hints)
        );
        assert!(resolve(None, &vars).is_err());
        let none: [(&str, &str); 0] = [];
        assert_eq!(
            resolve(None, &none).unwrap(),
            (EngineChoice::Auto, ChoiceSource::Default)
        );
        assert_eq!(
            resolve(None, &[(ENGINE_VAR, "soft")]).unwrap(),
            (EngineChoice::Soft, ChoiceSource::Env)
        );
    }
}
