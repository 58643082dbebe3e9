//! Helper macros shared by the header modules.

/// Declares a field enum over an integer type that keeps an `Unknown(raw)` variant, so that
/// converting any raw value never fails and converting back gives the same raw value.
///
/// Variants follow the order the specification gives them.
macro_rules! enum_with_unknown {
    (
        $( #[$enum_attr:meta] )*
        pub enum $name:ident($ty:ty) {
            $(
                $( #[$variant_attr:meta] )*
                $variant:ident = $value:expr
            ),+ $(,)?
        }
    ) => {
        #[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Clone, Copy)]
        $( #[$enum_attr] )*
        pub enum $name {
            $(
                $( #[$variant_attr] )*
                $variant
            ),*,
            /// A value the specification reserves or this crate does not name.
            Unknown($ty),
        }

        impl ::core::convert::From<$ty> for $name {
            fn from(value: $ty) -> Self {
                match value {
                    $( $value => $name::$variant ),*,
                    other => $name::Unknown(other),
                }
            }
        }

        impl ::core::convert::From<$name> for $ty {
            fn from(value: $name) -> Self {
                match value {
                    $( $name::$variant => $value ),*,
                    $name::Unknown(other) => other,
                }
            }
        }
    };
}
