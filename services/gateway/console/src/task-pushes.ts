import { useEffect } from 'preact/hooks';
import { useLive } from './app';
import type { PushNotification } from '@kandev/contracts';

/** Call `fn` (debounced) for every push that concerns this task or session. */
export function useTaskPushes(match: (n: PushNotification) => boolean, fn: (n: PushNotification) => void, deps: unknown[]) {
  const live = useLive();
  useEffect(() => {
    let timer: ReturnType<typeof setTimeout> | null = null;
    let last: PushNotification | null = null;
    const off = live.onNotification((n) => {
      if (!match(n)) return;
      last = n;
      if (timer) return;
      timer = setTimeout(() => {
        timer = null;
        fn(last!);
      }, 120);
    });
    return () => (off(), timer && clearTimeout(timer));
  }, deps);
}
