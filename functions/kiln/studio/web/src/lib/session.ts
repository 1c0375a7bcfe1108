// The key is kept in memory and in sessionStorage (gone when the tab closes); never in
// localStorage, a cookie, the URL or a log line.
const SLOT = "kiln.studio.key";

export function loadKey(): string | null {
  try {
    return sessionStorage.getItem(SLOT);
  } catch {
    return null;
  }
}

export function storeKey(key: string): void {
  try {
    sessionStorage.setItem(SLOT, key);
  } catch {
    /* private mode: memory only */
  }
}

export function forgetKey(): void {
  try {
    sessionStorage.removeItem(SLOT);
  } catch {
    /* nothing stored */
  }
}
