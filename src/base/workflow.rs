//! Typed workflow references: `Workflow<I, O>` names a workflow and says, to the compiler, what
//! it takes and returns, so registering, starting, enqueueing and awaiting it are checked at
//! compile time. A plain name (`&str`, `String`) stays accepted wherever a reference is, for
//! workflows of other processes and languages; its output is [`Untyped`].
//!
//! Types only: nothing here runs, stores or validates anything.
//!
//! **Why this shape.** `Workflow<I, O>` is a `const` name plus phantom types; it is not produced by
//! registration, so it can be declared beside the function and used from any module (or by a client
//! process that registers nothing). `register(REF, f)` checks `f` against it through `WorkflowFn<I,
//! O>`. Calls taking a workflow are generic over `WorkflowRef<I>`, implemented by `Workflow<I, O>`
//! (exactly its `I`) and by `&str`/`String` (any serializable input, output `Untyped`), so the
//! string forms are unchanged. One handle type serves both: `WorkflowHandle<O =
//! Untyped>::result::<T>()` requires `O: ReadAs<T>`, which holds for `T = O` only (so a typed
//! handle's `result()` infers `O`, and another type is a compile error) or for any `T` when `O` is
//! `Untyped`. `Untyped` implements no `Deserialize`, which is what keeps the two `ReadAs` impls
//! apart.

use std::fmt;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A typed reference to a workflow: its registered name, its input type `I` and its output type
/// `O`. Declare it once as a constant and use it everywhere: the runtime's builder registers a
/// function under it only if the function takes `I` and returns `O`
/// ([`RuntimeBuilder::register`](crate::RuntimeBuilder::register)), and starts, enqueues and
/// child calls made with it take an `I` and give a handle whose `result()` is an `O`.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use stead::{Context, Runtime, Workflow, WorkflowOptions};
///
/// #[derive(Serialize, Deserialize)]
/// struct Order { id: u64, cents: u64 }
/// #[derive(Serialize, Deserialize, Debug, PartialEq)]
/// struct Receipt { order: u64, paid: u64 }
///
/// const CHECKOUT: Workflow<Order, Receipt> = Workflow::new("checkout");
///
/// async fn checkout(ctx: Context, order: Order) -> stead::Result<Receipt> {
///     let paid = ctx.step("charge", || async { Ok(order.cents) }).await?;
///     Ok(Receipt { order: order.id, paid })
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> stead::Result<()> {
/// # let dir = std::env::temp_dir().join(format!("stead-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// # let url = format!("sqlite://{}", dir.join("workflow-ref.sqlite").display());
/// let runtime = Runtime::builder()
///     .database_url(url)
///     .register(CHECKOUT, checkout)
///     .launch()
///     .await?;
/// let order = Order { id: 17, cents: 2500 };
/// let handle = runtime.start(CHECKOUT, order, WorkflowOptions::default()).await?;
/// let receipt = handle.result().await?; // a `Receipt`: no annotation needed
/// assert_eq!(receipt, Receipt { order: 17, paid: 2500 });
/// runtime.shutdown(std::time::Duration::from_secs(5)).await?;
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok(()) }
/// ```
///
/// A function of another type does not register:
///
/// ```compile_fail,E0631
/// # use stead::{Context, Runtime, Workflow};
/// const CHECKOUT: Workflow<u64, String> = Workflow::new("checkout");
/// async fn checkout(_: Context, order: String) -> stead::Result<String> { Ok(order) }
/// let builder = Runtime::builder().register(CHECKOUT, checkout);
/// ```
///
/// and a handle's result is the workflow's output type, not another:
///
/// ```compile_fail,E0308
/// # use stead::{Runtime, Workflow, WorkflowOptions};
/// const CHECKOUT: Workflow<u64, String> = Workflow::new("checkout");
/// # async fn demo(runtime: Runtime) -> stead::Result<()> {
/// let handle = runtime.start(CHECKOUT, 17, WorkflowOptions::default()).await?;
/// let receipt: u64 = handle.result().await?;
/// # Ok(()) }
/// ```
pub struct Workflow<I, O> {
    name: &'static str,
    types: PhantomData<fn(I) -> O>,
}

impl<I, O> Workflow<I, O> {
    /// A reference to the workflow registered under `name`.
    pub const fn new(name: &'static str) -> Workflow<I, O> {
        Workflow {
            name,
            types: PhantomData,
        }
    }

    /// The name the workflow is registered (and stored) under.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<I, O> Clone for Workflow<I, O> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<I, O> Copy for Workflow<I, O> {}

impl<I, O> PartialEq for Workflow<I, O> {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl<I, O> Eq for Workflow<I, O> {}

impl<I, O> fmt::Debug for Workflow<I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Workflow").field(&self.name).finish()
    }
}

/// The output of a workflow named by a string: unknown to the compiler, so its handle's
/// `result::<T>()` decodes into whatever `T` the caller asks for (and fails at run time if the
/// stored output does not fit). It has no values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Untyped {}

/// What names a workflow taking `I`: a typed [`Workflow<I, O>`] (only with an `I`), or its name
/// as `&str` or `String` (with any serializable input). Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not name a workflow taking `{I}`",
    label = "a `Workflow<I, O>` takes exactly its `I`; a name takes any serializable input"
)]
pub trait WorkflowRef<I>: sealed::Sealed {
    /// What the workflow returns: `O` for a `Workflow<I, O>`, [`Untyped`] for a name.
    type Output: 'static;

    /// The registered name.
    fn name(&self) -> &str;
}

impl<I, O: 'static> WorkflowRef<I> for Workflow<I, O> {
    type Output = O;

    fn name(&self) -> &str {
        self.name
    }
}

impl<I: Serialize> WorkflowRef<I> for &str {
    type Output = Untyped;

    fn name(&self) -> &str {
        self
    }
}

impl<I: Serialize> WorkflowRef<I> for String {
    type Output = Untyped;

    fn name(&self) -> &str {
        self
    }
}

impl<I: Serialize> WorkflowRef<I> for &String {
    type Output = Untyped;

    fn name(&self) -> &str {
        self
    }
}

/// `O: ReadAs<T>`: a result of a workflow returning `O` may be read as a `T`. A typed
/// workflow's result reads only as its own output type (so `result()` needs no annotation); an
/// [`Untyped`] one as any deserializable `T` (`result::<T>()`, or `let t: T = ...`).
#[diagnostic::on_unimplemented(
    message = "this workflow returns `{Self}`, not `{T}`",
    label = "a handle on a `Workflow<I, O>` gives an `O`"
)]
pub trait ReadAs<T>: sealed::Reads<T> {}

impl<T: DeserializeOwned> ReadAs<T> for T {}

impl<T: DeserializeOwned> ReadAs<T> for Untyped {}

mod sealed {
    use serde::de::DeserializeOwned;

    pub trait Sealed {}

    impl<I, O> Sealed for super::Workflow<I, O> {}
    impl Sealed for &str {}
    impl Sealed for String {}
    impl Sealed for &String {}

    /// Keeps others from adding `ReadAs` impls, which would make `result()` ambiguous.
    pub trait Reads<T> {}

    impl<T: DeserializeOwned> Reads<T> for T {}
    impl<T: DeserializeOwned> Reads<T> for super::Untyped {}
}
