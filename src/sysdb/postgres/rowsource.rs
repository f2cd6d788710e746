//! A batch's requests as the rows `r` of a statement, from one column list: one array per
//! column under `UNNEST` for a batch, or one row of scalars for a lone request (no arrays to
//! build and unnest on the path of an awaited enqueue or a step). Builds fragments only; it
//! knows no statement.
//!
//! **A lone request is one row.** A start or checkpoint flush of one request binds sixteen (ten)
//! scalars into a one-row `SELECT` instead of one-element arrays under `UNNEST` (`start.rs`,
//! `steps.rs`); batches keep the arrays. An awaited producer's every enqueue and a workflow's steps
//! one after another are lone requests: the arrays' build, unnest and row estimate cost the awaited
//! producer 15% of its rate (W3f +13%, W1 −8% µs/step; `benches/README.md`). The price is one more
//! prepared statement per lane. A lone finish (with its held step) as one row measured within the
//! noise (`benches/ab.sh`, medians of 5: W3f +1%, W1 −3%) and keeps its arrays.

/// A column of the rows: its name in `r` and its Postgres type.
pub(super) type Column = (&'static str, &'static str);

/// The rows from one array per column, parameters from `${p}`; with `numbered`, a last column
/// `n` gives each row's place in the arrays.
pub(super) fn arrays(columns: &[Column], p: usize, numbered: bool) -> String {
    let arrays: Vec<String> = (p..)
        .zip(columns)
        .map(|(i, (_, ty))| format!("${i}::{ty}[]"))
        .collect();
    let mut names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
    let ordinality = if numbered {
        names.push("n");
        " WITH ORDINALITY"
    } else {
        ""
    };
    format!(
        "UNNEST({}){ordinality} AS r({})",
        arrays.join(", "),
        names.join(", ")
    )
}

/// A lone request's row from one value per column, parameters from `${p}`; with `numbered`,
/// `n` is 1 as in [`arrays`].
pub(super) fn single(columns: &[Column], p: usize, numbered: bool) -> String {
    let mut values: Vec<String> = (p..)
        .zip(columns)
        .map(|(i, (name, ty))| format!("${i}::{ty} AS {name}"))
        .collect();
    if numbered {
        values.push("1::int8 AS n".into());
    }
    format!("(SELECT {}) AS r", values.join(", "))
}

/// A call of `function` (schema-qualified with `{s}`) with one array per column, parameters from
/// `${p}`; with `lone`, each parameter is a scalar wrapped in a one-element array (the Citus
/// form of [`arrays`] and [`single`]: the function takes the batch's arrays).
/// `extra` are further arguments after the arrays, as written.
pub(super) fn call(
    function: &str,
    columns: &[Column],
    p: usize,
    lone: bool,
    extra: &[&str],
) -> String {
    let mut args: Vec<String> = (p..)
        .zip(columns)
        .map(|(i, (_, ty))| {
            if lone {
                format!("ARRAY[${i}::{ty}]")
            } else {
                format!("${i}::{ty}[]")
            }
        })
        .collect();
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    format!("SELECT * FROM {{s}}.{function}({})", args.join(", "))
}

/// The columns' types in order, as a `PREPARE` lists its parameters (plan tests).
#[cfg(test)]
pub(super) fn types(columns: &[Column]) -> String {
    let types: Vec<&str> = columns.iter().map(|(_, ty)| *ty).collect();
    types.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const COLUMNS: [Column; 2] = [("id", "text"), ("fid", "int4")];

    #[test]
    fn both_forms_name_the_same_columns_from_the_same_parameters() {
        assert_eq!(
            arrays(&COLUMNS, 3, true),
            "UNNEST($3::text[], $4::int4[]) WITH ORDINALITY AS r(id, fid, n)"
        );
        assert_eq!(
            single(&COLUMNS, 3, true),
            "(SELECT $3::text AS id, $4::int4 AS fid, 1::int8 AS n) AS r"
        );
        assert_eq!(
            arrays(&COLUMNS, 1, false),
            "UNNEST($1::text[], $2::int4[]) AS r(id, fid)"
        );
        assert_eq!(types(&COLUMNS), "text, int4");
    }
}
