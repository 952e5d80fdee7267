Bc
ÃõHp