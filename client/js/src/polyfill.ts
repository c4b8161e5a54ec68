// Node 20 provides Symbol.asyncDispose (as Symbol.for("nodejs.asyncDispose"));
// older runtimes and some bundlers do not: define it with the same identity
// so `await using` (TypeScript's downlevel helpers) finds our disposer.
const S = Symbol as { asyncDispose?: symbol; dispose?: symbol };
if (S.asyncDispose === undefined) {
  Object.defineProperty(Symbol, "asyncDispose", {
    value: Symbol.for("nodejs.asyncDispose"),
  });
}
if (S.dispose === undefined) {
  Object.defineProperty(Symbol, "dispose", {
    value: Symbol.for("nodejs.dispose"),
  });
}
export {};
