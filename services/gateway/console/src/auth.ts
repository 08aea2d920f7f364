import { tokenUsable } from './model';

/*
 * The operator's sign-in (ADR 0058): the token lives in this tab's sessionStorage only (never
 * localStorage, a cookie or a URL). Tabs of the console's origin share it over a BroadcastChannel:
 * a new tab asks, a signed-in tab offers; a sign-out, or a token the gateway refused, reaches every tab.
 */

const TOKEN_KEY = 'kandev.operatorToken';
const CHANNEL = 'kandev-auth';
/** How long a new tab waits for another tab to offer its token before showing the sign-in form. */
const ASK_MS = 500;

type AuthMessage = { type: 'token-request'; nonce: string } | { type: 'token-offer'; nonce: string; token: string } | { type: 'sign-out' };

export const token = {
  get: (): string | null => sessionStorage.getItem(TOKEN_KEY),
  set: (t: string) => sessionStorage.setItem(TOKEN_KEY, t),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

const channel = typeof BroadcastChannel === 'undefined' ? null : new BroadcastChannel(CHANNEL);
const post = (m: AuthMessage) => channel?.postMessage(m);

/** Listeners told when this tab is signed out (here, in another tab, or by a refused token). */
const signedOut = new Set<() => void>();
export const onSignedOut = (fn: () => void) => (signedOut.add(fn), () => signedOut.delete(fn));
const dropToken = () => {
  token.clear();
  signedOut.forEach((fn) => fn());
};

channel?.addEventListener('message', (ev: MessageEvent<AuthMessage>) => {
  const m = ev.data;
  if (m.type === 'sign-out') dropToken();
  else if (m.type === 'token-request') {
    const t = token.get();
    if (t && tokenUsable(t)) post({ type: 'token-offer', nonce: m.nonce, token: t });
  }
});

/** Sign out every tab of the console: each clears its token and closes its socket. */
export function signOut(): void {
  post({ type: 'sign-out' });
  dropToken();
}

/** The gateway refused the token this tab holds (a 401, or /ws closed with 4401 when it expired): it is refused in every tab. */
export const tokenRefused = signOut;

/**
 * A tab that starts without a token asks the others (the first offer of a token not yet expired wins)
 * and keeps it in its own sessionStorage; null after ASK_MS without one.
 */
export function askOtherTabs(): Promise<string | null> {
  const ch = channel;
  if (!ch) return Promise.resolve(null);
  const nonce = crypto.randomUUID();
  return new Promise((resolve) => {
    const done = (t: string | null) => {
      clearTimeout(timer);
      ch.removeEventListener('message', onOffer);
      if (t) token.set(t);
      resolve(t);
    };
    const onOffer = (ev: MessageEvent<AuthMessage>) => {
      const m = ev.data;
      if (m.type === 'token-offer' && m.nonce === nonce && tokenUsable(m.token)) done(m.token);
    };
    const timer = setTimeout(() => done(null), ASK_MS);
    ch.addEventListener('message', onOffer);
    post({ type: 'token-request', nonce });
  });
}
