// JavaScript values from JSON tags, for stead's interoperability tests: `{"$js": "Date",
// "iso": ..}`, `BigInt` (`text`), `Map` (`entries`), `Set` (`items`), `undefined`, `RegExp`
// (`source`, `flags`), `Error` (`name`, `message`), `Buffer` (`hex`), `NaN`, and `cycle` (an
// object holding itself). Anything else is plain JSON, converted recursively.
'use strict';

function typed(v) {
  if (Array.isArray(v)) return v.map(typed);
  if (v === null || typeof v !== 'object') return v;
  switch (v.$js) {
    case undefined:
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, typed(x)]));
    case 'Date':
      return new Date(v.iso);
    case 'BigInt':
      return BigInt(v.text);
    case 'Map':
      return new Map(v.entries.map(([k, x]) => [typed(k), typed(x)]));
    case 'Set':
      return new Set(v.items.map(typed));
    case 'undefined':
      return undefined;
    case 'RegExp':
      return new RegExp(v.source, v.flags);
    case 'Error': {
      const e = new Error(v.message);
      e.name = v.name;
      return e;
    }
    case 'Buffer':
      return Buffer.from(v.hex, 'hex');
    case 'NaN':
      return NaN;
    case 'cycle': {
      const o = { name: 'loop' };
      o.self = o;
      return o;
    }
    default:
      throw new Error(`unknown tag ${v.$js}`);
  }
}

// JSON text of what a DBOS reader returned: a bigint as its text, a Map as an object, a Set as
// an array (what each is in portable JSON).
function show(v) {
  return JSON.stringify(v === undefined ? null : v, (_, x) => {
    if (typeof x === 'bigint') return x.toString();
    if (x instanceof Map) return Object.fromEntries(x);
    if (x instanceof Set) return [...x];
    return x;
  });
}

module.exports = { typed, show };
