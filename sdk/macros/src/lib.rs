//! The `#[job]` attribute of `cronrun-sdk` (use it as `cronrun_sdk::job`).
//!
//! It keeps the function as written, exports it as the component's `run` through the
//! SDK's wit-bindgen bindings, and embeds the schedule and policy as JSON in a custom
//! section named `cronrun-manifest`. See the `cronrun-sdk` docs.

use proc_macro::TokenStream;
use proc_macro2::{Literal, Span};
use quote::quote;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, FnArg, ItemFn, Lit, Meta, MetaNameValue, ReturnType, Token};

mod manifest;
#[cfg(test)]
mod tests;

use manifest::Value;

/// The name of the custom section that carries the manifest JSON.
const SECTION: &str = "cronrun-manifest";

/// Marks `fn NAME(ctx: &Context) -> Result<T, E>` as the job; see `cronrun_sdk::job`.
#[proc_macro_attribute]
pub fn job(attr: TokenStream, item: TokenStream) -> TokenStream {
    match expand(attr.into(), item.into()) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(attr: proc_macro2::TokenStream, item: proc_macro2::TokenStream) -> syn::Result<proc_macro2::TokenStream> {
    let args = Punctuated::<Meta, Token![,]>::parse_terminated
        .parse2(attr)
        .map_err(|e| syn::Error::new(e.span(), format!("{e}: write #[job(schedule = \"...\", key = value, ...)]")))?;
    let mut entries = Vec::new();
    let mut spans = Vec::new();
    for arg in &args {
        let (key, value) = entry(arg)?;
        entries.push((key.clone(), value));
        spans.push((key, arg));
    }
    let json = manifest::build(&entries).map_err(|e| {
        match e.key.and_then(|k| spans.iter().filter(|(name, _)| *name == k).nth(e.nth).map(|(_, arg)| arg)) {
            Some(arg) => syn::Error::new_spanned(arg, e.message),
            None => syn::Error::new(Span::call_site(), e.message),
        }
    })?;

    let func: ItemFn = syn::parse2(item)?;
    check_signature(&func)?;
    let name = &func.sig.ident;
    let bytes = Literal::byte_string(json.as_bytes());
    let len = json.len();

    Ok(quote! {
        #func

        // Everything generated lives in an anonymous const so that nothing clashes with
        // the user's names; the `run` export itself is a linker symbol.
        const _: () = {
            struct __CronrunJob;

            impl ::cronrun_sdk::__private::Guest for __CronrunJob {
                fn run(
                    ctx: ::cronrun_sdk::__private::JobContext,
                ) -> ::core::result::Result<::core::option::Option<::std::string::String>, ::std::string::String> {
                    ::cronrun_sdk::__private::call(ctx, #name)
                }
            }

            ::cronrun_sdk::__private::export!(__CronrunJob with_types_in ::cronrun_sdk::__private::bindings);

            // The manifest, as a custom section of the core module (wasm-component-ld keeps
            // it in the component's embedded module). Only wasm has free-form section names.
            #[used]
            #[cfg_attr(target_family = "wasm", unsafe(link_section = #SECTION))]
            static __CRONRUN_MANIFEST: [u8; #len] = *#bytes;
        };
    })
}

/// `key = literal`, or `key(inner = literal, ...)` for the triggers `on` and `after`.
fn entry(arg: &Meta) -> syn::Result<(String, Value)> {
    let key = arg.path().get_ident().map(ToString::to_string).ok_or_else(|| {
        syn::Error::new_spanned(arg.path(), "expected a key such as `schedule`, `timezone` or `timeout`")
    })?;
    let value = match arg {
        Meta::NameValue(nv) => literal(&nv.value)?,
        Meta::List(list) => {
            let inner = list.parse_args_with(Punctuated::<MetaNameValue, Token![,]>::parse_terminated)?;
            let mut table = Vec::new();
            for nv in &inner {
                let name = nv.path.get_ident().map(ToString::to_string).ok_or_else(|| {
                    syn::Error::new_spanned(&nv.path, format!("expected a key of {key}(...), e.g. subject or job"))
                })?;
                table.push((name, literal(&nv.value)?));
            }
            Value::Table(table)
        }
        Meta::Path(path) => {
            return Err(syn::Error::new_spanned(
                path,
                format!("`{key}` needs a value: write #[job(schedule = \"...\", key = value, ...)]"),
            ));
        }
    };
    Ok((key, value))
}

fn literal(expr: &Expr) -> syn::Result<Value> {
    match expr {
        Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => Ok(Value::Str(s.value())),
        Expr::Lit(ExprLit { lit: Lit::Bool(b), .. }) => Ok(Value::Bool(b.value)),
        Expr::Lit(ExprLit { lit: Lit::Int(i), .. }) => Ok(Value::Int(i.base10_parse()?)),
        other => Err(syn::Error::new_spanned(other, "expected a literal: \"text\", a number, true or false")),
    }
}

fn check_signature(func: &ItemFn) -> syn::Result<()> {
    let sig = &func.sig;
    let expected = "#[job] goes on `fn run(ctx: &Context) -> Result<Option<String>, String>` (any name; Ok may be (), String or Option<String>; Err any Display)";
    if let Some(token) = &sig.asyncness {
        return Err(syn::Error::new_spanned(token, format!("a job function cannot be async: {expected}")));
    }
    if !sig.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(&sig.generics, format!("a job function cannot be generic: {expected}")));
    }
    if sig.inputs.len() != 1 || matches!(sig.inputs.first(), Some(FnArg::Receiver(_))) {
        return Err(syn::Error::new_spanned(
            &sig.inputs,
            format!("a job function takes exactly one argument: {expected}"),
        ));
    }
    if let ReturnType::Default = sig.output {
        return Err(syn::Error::new_spanned(sig, format!("a job function returns a Result: {expected}")));
    }
    Ok(())
}
