//! Typed errors that survive the database: a user's serde error type, registered on the
//! builder, is stored in DBOS's portable error shape (`name`: its type's name, `message`: its
//! `Display`, `data`: its serde JSON) so other SDKs read it, and read back as that type by the
//! caller ([`Error::user_error`], [`PortableError::decode`]).
//!
//! It only converts; it never decides a workflow's or a step's outcome.
//!
//! **Why registered.** Rust cannot ask an erased `Box<dyn Error>` whether its type is `Serialize`,
//! so the builder registers the types to keep (`typed_error::<E>()`): each is an encoder that
//! downcasts. A workflow's error (after `PortableError` and stead's own `Error` pass through) or a
//! step attempt's error that downcasts to a registered `E` is stored as `{"name": <E's type name
//! without path>, "message": <Display>, "data": <serde JSON>}`; DBOS Python's client raises it as
//! `PortableWorkflowError` with those fields (the typed-error tests). A step failure stays a
//! `StepError` (its `attempts` kept) and carries the typed error as `StepError::error`, stored
//! under `data.error`. Reading back is by name and shape: `decode::<E>()` is `Some` when `name` is
//! `E`'s short type name and `data` deserializes into `E`, looking through a `StepError` to its
//! `data.error` (a workflow that returned a step's error with `?`). Two types sharing a short name
//! and a data shape are indistinguishable by design (other SDKs name errors the same way).

use std::error::Error as StdError;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::base::codec;
use crate::error::{Error, PortableError};

type Encoder = Arc<dyn Fn(&(dyn StdError + 'static)) -> Option<PortableError> + Send + Sync>;

/// The error types registered with [`RuntimeBuilder::typed_error`](crate::RuntimeBuilder::typed_error).
#[derive(Clone, Default)]
pub(crate) struct UserErrors {
    encoders: Vec<Encoder>,
}

impl UserErrors {
    /// Registers `E`: an error of that type is stored with its serde JSON as `data`.
    pub(crate) fn add<E>(&mut self)
    where
        E: StdError + Serialize + 'static,
    {
        self.encoders
            .push(Arc::new(|e| e.downcast_ref::<E>().map(encode)));
    }

    /// The stored form of `error` when its type is registered.
    pub(crate) fn portable(&self, error: &(dyn StdError + 'static)) -> Option<PortableError> {
        self.encoders.iter().find_map(|encode| encode(error))
    }
}

/// `E`'s portable form. A value whose `Serialize` fails (or holds a NaN) keeps its name and
/// message, without data.
fn encode<E: StdError + Serialize>(e: &E) -> PortableError {
    let data = codec::encode(e, "an error's data")
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok());
    PortableError {
        data,
        ..PortableError::new(short_type_name::<E>(), codec::describe(e))
    }
}

/// `my_crate::errors::PaymentError<T>` → `PaymentError`; boxed trait objects → `Error`.
pub(crate) fn short_type_name<E: ?Sized>() -> String {
    let full = std::any::type_name::<E>();
    if full.contains("dyn ") {
        return "Error".into();
    }
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base).to_owned()
}

impl PortableError {
    /// The user's error of type `E` this stored error holds: `Some` when its `name` is `E`'s
    /// type name (without its path) and its `data` deserializes into `E`. A step failure
    /// (`StepError`) is looked through to the error its last attempt returned.
    ///
    /// Errors written by other SDKs decode too when they use the same name and data shape
    /// (DBOS Python's `PortableWorkflowError(message, name, code, data)`).
    pub fn decode<E: DeserializeOwned>(&self) -> Option<E> {
        if self.name == short_type_name::<E>() {
            if let Some(e) = self
                .data
                .clone()
                .and_then(|d| serde_json::from_value(d).ok())
            {
                return Some(e);
            }
        }
        let inner = self.data.as_ref()?.get("error")?;
        serde_json::from_value::<PortableError>(inner.clone())
            .ok()?
            .decode()
    }
}

impl Error {
    /// The user's own error of type `E`, when this is a workflow's failure
    /// ([`Error::WorkflowFailed`], as `handle.result()` gives it) or a step's
    /// ([`Error::Step`]) whose error was an `E` registered with
    /// [`RuntimeBuilder::typed_error`](crate::RuntimeBuilder::typed_error). `None` for any
    /// other error, or when the stored error is of another type.
    ///
    /// ```no_run
    /// # #[derive(Debug, serde::Serialize, serde::Deserialize, thiserror::Error)]
    /// # #[error("declined")] struct PaymentError;
    /// # async fn demo(handle: stead::WorkflowHandle<String>) {
    /// match handle.result().await {
    ///     Ok(receipt) => println!("paid: {receipt}"),
    ///     Err(e) => match e.user_error::<PaymentError>() {
    ///         Some(payment) => println!("declined: {payment:?}"),
    ///         None => println!("failed: {e}"),
    ///     },
    /// }
    /// # }
    /// ```
    pub fn user_error<E: DeserializeOwned>(&self) -> Option<E> {
        match self {
            Error::WorkflowFailed { error, .. } => error.decode(),
            Error::Step(step) => step.error.as_ref()?.decode(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
    enum PaymentError {
        #[error("card declined ({code})")]
        Declined { code: u32 },
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
    #[error("other")]
    struct OtherError {
        code: u32,
    }

    #[test]
    fn a_registered_error_is_stored_as_dbos_reads_it_and_decodes_back() {
        let mut errors = UserErrors::default();
        errors.add::<PaymentError>();
        let e = PaymentError::Declined { code: 51 };
        let p = errors.portable(&e).expect("registered");
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            serde_json::json!({"name": "PaymentError", "message": "card declined (51)",
                "data": {"Declined": {"code": 51}}})
        );
        assert_eq!(p.decode::<PaymentError>(), Some(e));
        assert_eq!(p.decode::<OtherError>(), None, "another type's name");
        assert!(errors.portable(&std::io::Error::other("x")).is_none());
    }

    #[test]
    fn a_step_failure_is_looked_through() {
        let inner = PortableError {
            data: Some(serde_json::json!({"code": 7})),
            ..PortableError::new("OtherError", "other")
        };
        let step = PortableError {
            data: Some(serde_json::json!({"step": "s", "attempts": ["other"], "error": inner})),
            ..PortableError::new("StepError", "step failed")
        };
        assert_eq!(step.decode::<OtherError>(), Some(OtherError { code: 7 }));
    }

    #[test]
    fn type_names_drop_paths_and_parameters() {
        assert_eq!(short_type_name::<PaymentError>(), "PaymentError");
        assert_eq!(short_type_name::<Vec<u8>>(), "Vec");
        assert_eq!(short_type_name::<Box<dyn StdError>>(), "Error");
    }
}
